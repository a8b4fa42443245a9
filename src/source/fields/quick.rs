//! The wanted fields of a JSON record read by hand, in one pass over its bytes:
//! strings are searched a block of bytes at a time for their end or an escape, and a
//! wanted string is decoded straight into its `String`. Through serde a string
//! with escapes was copied twice (into serde's scratch buffer, then out of it), and
//! reading the records cost an eighth of a build's time on one thread.
//!
//! It answers only where its answer is surely the serde path's: a record it
//! reads to the end with the syntax below. Anything else (a syntax error,
//! an escaped surrogate, a number with an exponent or of many digits, deep
//! nesting) gets `None`, and the serde path gives the answer or the error.

use std::borrow::Cow;

use super::{Found, Wanted};

/// Nesting deeper than this goes to serde (its own limit, an error, is 128).
const MAX_DEPTH: usize = 100;
/// A number longer than this goes to serde, which can find it out of range.
const MAX_NUMBER_BYTES: usize = 100;

/// The fields of `json`, one `Found` per slot, or `None` to ask serde.
pub(super) fn extract(wanted: &Wanted, json: &str, slots: usize) -> Option<Vec<Found>> {
    let mut found = vec![Found::Absent; slots];
    let mut reader = Reader { bytes: json.as_bytes(), text: json, at: 0 };
    reader.whitespace();
    reader.node(wanted, &mut found, 0)?;
    reader.whitespace();
    (reader.at == reader.bytes.len()).then_some(found)
}

struct Reader<'a> {
    bytes: &'a [u8],
    /// The same bytes as text: whole runs of a string are copied from it.
    text: &'a str,
    at: usize,
}

impl<'a> Reader<'a> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn whitespace(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.peek() {
            self.at += 1;
        }
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    /// A value on the way to wanted leaves: only an object leads anywhere.
    fn node(&mut self, wanted: &Wanted, found: &mut [Found], depth: usize) -> Option<()> {
        if self.peek()? != b'{' {
            return self.skip(depth);
        }
        self.at += 1;
        self.members(depth, |reader, key| match wanted.children.get(key) {
            Some(child) => {
                // A key given again replaces what the earlier one held.
                for &slot in child.below.iter().chain(&child.slot) {
                    found[slot] = Found::Absent;
                }
                match child.slot {
                    Some(slot) => found[slot] = reader.leaf(depth + 1)?,
                    None => reader.node(child, found, depth + 1)?,
                }
                Some(())
            }
            None => reader.skip(depth + 1),
        })
    }

    /// An object's members after its `{`, each value read by `value` (given the key).
    fn members(&mut self, depth: usize, mut value: impl FnMut(&mut Self, &str) -> Option<()>) -> Option<()> {
        self.items(depth, b'}', |reader| {
            reader.expect(b'"')?;
            let key = reader.string()?;
            reader.whitespace();
            reader.expect(b':')?;
            reader.whitespace();
            value(reader, &key)
        })
    }

    /// The comma-separated items of an object or array after its opening
    /// bracket, up to and including `close`, each read by `item`.
    fn items(&mut self, depth: usize, close: u8, mut item: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.whitespace();
        if self.peek()? == close {
            self.at += 1;
            return Some(());
        }
        loop {
            item(self)?;
            self.whitespace();
            match self.peek()? {
                b',' => {
                    self.at += 1;
                    self.whitespace();
                }
                byte if byte == close => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// A wanted value: kept when it is a string, told apart from null otherwise.
    fn leaf(&mut self, depth: usize) -> Option<Found> {
        match self.peek()? {
            b'"' => {
                self.at += 1;
                Some(Found::Str(self.string()?.into_owned()))
            }
            b'n' => self.literal(b"null").map(|()| Found::Null),
            _ => self.skip(depth).map(|()| Found::Other),
        }
    }

    /// Checks a value nobody wants and steps over it.
    fn skip(&mut self, depth: usize) -> Option<()> {
        match self.peek()? {
            b'{' => {
                self.at += 1;
                self.members(depth, |reader, _| reader.skip(depth + 1))
            }
            b'[' => {
                self.at += 1;
                self.items(depth, b']', |reader| reader.skip(depth + 1))
            }
            b'"' => {
                self.at += 1;
                self.skip_string()
            }
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        self.bytes[self.at..].starts_with(word).then(|| self.at += word.len())
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)?`; an exponent goes to serde.
    fn number(&mut self) -> Option<()> {
        let start = self.at;
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        match self.peek()? {
            b'0' => self.at += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.peek() == Some(b'.') {
            self.at += 1;
            let fraction = self.at;
            self.digits();
            if self.at == fraction {
                return None;
            }
        }
        let ends_well = !matches!(self.peek(), Some(b'e' | b'E' | b'0'..=b'9'));
        (ends_well && self.at - start <= MAX_NUMBER_BYTES).then_some(())
    }

    fn digits(&mut self) {
        while let Some(b'0'..=b'9') = self.peek() {
            self.at += 1;
        }
    }

    /// A string's text after its opening quote, escapes decoded (borrowed when
    /// it has none).
    fn string(&mut self) -> Option<Cow<'a, str>> {
        let stop = special_at_or_after(self.bytes, self.at);
        match self.bytes.get(stop)? {
            b'"' => {
                let text: &'a str = self.text;
                let run = text.get(self.at..stop)?;
                self.at = stop + 1;
                Some(Cow::Borrowed(run))
            }
            b'\\' => self.decode_escaped(stop).map(Cow::Owned),
            _ => None,
        }
    }

    /// The rest of a string whose first escape is at `backslash`, decoded.
    ///
    /// Code has an escape every 16 bytes or so (`\n`, `\"`), so the plain runs
    /// between them are short, and this loop runs once per escape: each block of
    /// `BLOCK` bytes is copied whole and the copy cut back to where its first
    /// special byte was, rather than searched first and then copied by its length.
    /// With blocks of 32 bytes rather than 16, so that the next escape is mostly
    /// within the first block, and one-letter escapes decoded through a table,
    /// reading the benchmarks' 100 MB of code and docs took 12-14% less CPU time.
    fn decode_escaped(&mut self, backslash: usize) -> Option<String> {
        let bytes = self.bytes;
        // Every byte of JSON text decodes to at most one byte (an escape of two to
        // six bytes gives one to three), so the decoded text is never longer than
        // its JSON text: this room also holds a block copied whole (see below).
        let mut decoded = Vec::with_capacity(bytes.len() - self.at);
        let room_start = self.at;
        decoded.extend_from_slice(&bytes[self.at..backslash]);
        let mut at = backslash;
        loop {
            // `at` is at a special byte.
            match *bytes.get(at)? {
                b'\\' => {
                    self.at = at + 1;
                    match self.escape()? {
                        ascii if ascii.is_ascii() => decoded.push(ascii as u8),
                        wide => decoded.extend_from_slice(wide.encode_utf8(&mut [0; 4]).as_bytes()),
                    }
                    at = self.at;
                }
                b'"' => {
                    self.at = at + 1;
                    // Whole characters of valid text cut at ASCII bytes, and whole
                    // characters from escapes: always valid, checked all the same.
                    simdutf8::basic::from_utf8(&decoded).ok()?;
                    // SAFETY: just checked to be UTF-8.
                    return Some(unsafe { String::from_utf8_unchecked(decoded) });
                }
                _ => return None,
            }
            // The plain text up to the next special byte.
            loop {
                let Some(block) = bytes.get(at..).and_then(<[u8]>::first_chunk::<BLOCK>) else {
                    let stop = special_at_or_after(bytes, at);
                    decoded.extend_from_slice(&bytes[at..stop]);
                    at = stop;
                    break;
                };
                // Room: `decoded` holds at most one byte per JSON byte before `at`,
                // and the JSON text goes on `BLOCK` bytes from `at`.
                debug_assert!(decoded.len() + BLOCK <= bytes.len() - room_start);
                debug_assert!(decoded.capacity() >= bytes.len() - room_start);
                let filled = decoded.len();
                // SAFETY: the `BLOCK` bytes after `filled` are within the capacity (above).
                unsafe { decoded.as_mut_ptr().add(filled).cast::<[u8; BLOCK]>().write_unaligned(*block) };
                let mask = special_mask(block);
                let plain = if mask == 0 { BLOCK } else { mask.trailing_zeros() as usize };
                // SAFETY: the first `plain` of the bytes just written are kept.
                unsafe { decoded.set_len(filled + plain) };
                at += plain;
                if mask != 0 {
                    break;
                }
            }
        }
    }

    /// Steps over a string after its opening quote, checking its escapes.
    fn skip_string(&mut self) -> Option<()> {
        loop {
            let stop = special_at_or_after(self.bytes, self.at);
            match self.bytes.get(stop)? {
                b'"' => {
                    self.at = stop + 1;
                    return Some(());
                }
                b'\\' => {
                    self.at = stop + 1;
                    self.escape()?;
                }
                _ => return None,
            }
        }
    }

    /// The character of the escape after a backslash. Surrogates (halves of
    /// `\uD83D\uDE80`, or a lone one, an error) go to serde. Inlined: code has
    /// one every 16 bytes or so.
    #[inline(always)]
    fn escape(&mut self) -> Option<char> {
        let letter = self.peek()?;
        self.at += 1;
        match ONE_LETTER_ESCAPES[letter as usize] {
            NOT_ONE_LETTER if letter == b'u' => self.unicode_escape(),
            NOT_ONE_LETTER => None,
            byte => Some(char::from(byte)),
        }
    }

    /// The character of a `\u` escape after its `u`: exactly four hex digits
    /// (no sign, unlike `from_str_radix`).
    #[inline(never)]
    fn unicode_escape(&mut self) -> Option<char> {
        let hex = self.bytes.get(self.at..self.at + 4)?;
        let code = hex.iter().try_fold(0, |code, &digit| Some(code << 4 | char::from(digit).to_digit(16)?))?;
        self.at += 4;
        char::from_u32(code)
    }
}

/// The first byte at or after `at` that ends a run of a string's plain text: a
/// quote, a backslash or a control character; `bytes.len()` when none.
fn special_at_or_after(bytes: &[u8], at: usize) -> usize {
    let at = special_in_blocks(bytes, at);
    bytes[at..].iter().position(|&byte| matches!(byte, b'"' | b'\\' | 0..=0x1f)).map_or(bytes.len(), |i| at + i)
}

/// Searches `BLOCK` bytes at a time; returns the special byte's place, or where
/// the last whole block ended.
fn special_in_blocks(bytes: &[u8], mut at: usize) -> usize {
    while let Some(block) = bytes.get(at..).and_then(<[u8]>::first_chunk::<BLOCK>) {
        let mask = special_mask(block);
        if mask != 0 {
            return at + mask.trailing_zeros() as usize;
        }
        at += 16;
    }
    at
}

/// Bytes searched and copied at once in a string's text.
const BLOCK: usize = 32;

/// What a one-letter escape's letter stands for, by the letter; `NOT_ONE_LETTER`
/// for `u` and for a letter that is no escape.
const ONE_LETTER_ESCAPES: [u8; 256] = {
    let mut table = [NOT_ONE_LETTER; 256];
    let pairs = [
        (b'"', b'"'),
        (b'\\', b'\\'),
        (b'/', b'/'),
        (b'b', 8),
        (b'f', 12),
        (b'n', b'\n'),
        (b'r', b'\r'),
        (b't', b'\t'),
    ];
    let mut i = 0;
    while i < pairs.len() {
        table[pairs[i].0 as usize] = pairs[i].1;
        i += 1;
    }
    table
};
/// No one-letter escape stands for a NUL byte (that is `\u0000`).
const NOT_ONE_LETTER: u8 = 0;

/// Bit `i` set where byte `i` of `block` is a quote, a backslash or a control
/// character.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn special_mask(block: &[u8; BLOCK]) -> u32 {
    use std::arch::x86_64::*;
    // SAFETY: SSE2 is part of x86-64, so every CPU this runs on has it; the loads
    // read the two halves of `block`, unaligned.
    unsafe {
        let (quote, backslash, control_max) =
            (_mm_set1_epi8(b'"' as i8), _mm_set1_epi8(b'\\' as i8), _mm_set1_epi8(0x1f));
        let half = |offset: usize| {
            let v = _mm_loadu_si128(block.as_ptr().add(offset).cast());
            // A control character is at most 0x1f: its unsigned max with 0x1f is 0x1f.
            let control = _mm_cmpeq_epi8(_mm_max_epu8(v, control_max), control_max);
            let special = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)), control);
            _mm_movemask_epi8(special) as u32
        };
        half(0) | half(16) << 16
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn special_mask(block: &[u8; BLOCK]) -> u32 {
    block.iter().enumerate().fold(0, |mask, (i, &byte)| mask | u32::from(matches!(byte, b'"' | b'\\' | 0..=0x1f)) << i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn pile_fields() -> Wanted {
        Wanted::new(&[vec!["text".into()], vec!["meta".into(), "pile_set_name".into()]]).unwrap()
    }

    /// What the serde path answers, errors as their messages.
    fn serde_answer(json: &str) -> Result<Vec<Found>, String> {
        pile_fields().extract_with_serde(json, 2).map_err(|err| err.to_string())
    }

    #[test]
    fn plain_records_are_read_here_and_the_rest_left_to_serde() {
        let text = |json: &str| extract(&pile_fields(), json, 2);
        let pile = r#"{"text": "a\u00e9\n\t\"q\" \/ \\", "meta": {"pile_set_name": "Github", "n": [1, -2.5, 0, true, null, {}]}}"#;
        let read = text(pile).expect("a Pile record is read by hand");
        assert_eq!(read, [Found::Str("aé\n\t\"q\" / \\".into()), Found::Str("Github".into())]);
        assert_eq!(Ok(read), serde_answer(pile));
        assert_eq!(text(r#"{"text": null, "meta": 1}"#), Some(vec![Found::Null, Found::Absent]));
        assert_eq!(text(r#"{"text": "a", "text": ["b"]}"#), Some(vec![Found::Other, Found::Absent]));
        assert_eq!(text(r#"{"meta": {"pile_set_name": "A"}, "meta": {}}"#), Some(vec![Found::Absent, Found::Absent]));
        for serdes in [
            r#"{"text": "\ud83d\ude80"}"#,
            r#"{"text": "x", "n": 1e5}"#,
            r#"{"text": "x", "n": 01}"#,
            r#"{"text": "x",}"#,
            r#"{"text": "x"} x"#,
            "{\"text\": \"tab\there\"}",
            &format!(r#"{{"text": "x", "n": {}}}"#, "9".repeat(400)),
            &format!(r#"{{"text": "x", "deep": {}{}}}"#, "[".repeat(200), "]".repeat(200)),
        ] {
            assert_eq!(text(serdes), None, "{serdes}");
        }
    }

    /// A JSON value's text, written with every kind of escape, number and spacing.
    fn json_value() -> impl Strategy<Value = String> {
        let space = prop::sample::select(vec!["", " ", "\n", "\t ", "\r\n"]);
        let leaf = prop_oneof![
            Just("null".to_string()),
            Just("true".to_string()),
            Just("false".to_string()),
            "-?(0|[1-9][0-9]{0,3})(\\.[0-9]{1,3})?([eE][+-]?[0-9]{1,3})?",
            // Escapes of every kind; `\u` below D800 or from E000, or a surrogate pair.
            "\"([a-z\u{e9}\u{1F680} /]|\\\\[\"\\\\/bfnrt]|\\\\u00[0-7][0-9a-fA-F]|\\\\u[0-9a-cA-C][0-9a-f]{3}|\\\\u[eE][0-9a-f]{3}|\\\\ud83d\\\\ude80){0,24}\"",
        ];
        leaf.prop_recursive(4, 24, 4, move |inner| {
            let key =
                prop::sample::select(vec!["\"text\"", "\"meta\"", "\"pile_set_name\"", "\"t\\u0065xt\"", "\"a\""]);
            let member = (space.clone(), key, space.clone(), inner.clone())
                .prop_map(|(before, key, after, value)| format!("{before}{key}{after}:{after}{value}{before}"));
            prop_oneof![
                prop::collection::vec(inner, 0..4).prop_map(|items| format!("[{}]", items.join(","))),
                prop::collection::vec(member, 0..5).prop_map(|members| format!("{{{}}}", members.join(","))),
            ]
        })
    }

    /// A record, or one with a character taken out or put in: mostly valid, and
    /// invalid in every way a character can make it.
    fn json_like() -> impl Strategy<Value = String> {
        let edit = prop::option::weighted(
            0.5,
            (
                any::<prop::sample::Index>(),
                prop::sample::select(vec!["", ",", "}", "]", "\"", "\\", "e", "0", " ", "\u{1}", "{"]),
            ),
        );
        (json_value(), edit).prop_map(|(json, edit)| match edit {
            None => json,
            Some((at, put)) => {
                let chars: Vec<char> = json.chars().collect();
                if chars.is_empty() {
                    return put.to_string();
                }
                let at = at.index(chars.len());
                let skip = usize::from(put.is_empty() || at % 2 == 0);
                chars[..at].iter().chain(put.chars().collect::<Vec<_>>().iter()).chain(&chars[at + skip..]).collect()
            }
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20000))]
        #[test]
        fn an_answer_given_here_is_the_serde_path_answer(json in json_like()) {
            if let Some(found) = extract(&pile_fields(), &json, 2) {
                prop_assert_eq!(Ok(found), serde_answer(&json), "{}", json);
            }
        }
    }

    #[test]
    fn escaped_strings_decode_as_serde_decodes_them_wherever_blocks_cut() {
        // Plain runs of every length up to two blocks and more, with two- and
        // four-byte characters across a block's end, between escapes of each kind.
        for length in 0..2 * BLOCK + 8 {
            for escape in [r#"\n"#, r#"\""#, r#"\\"#, r#"\u00e9"#, r#"\ud83d\ude80"#] {
                let run: String = (0..length).map(|i| ['a', '\u{e9}', '\u{1F680}', ' '][i % 4]).collect();
                let json = format!(r#"{{"text": "{run}{escape}{run}{escape}x"}}"#);
                let read = extract(&pile_fields(), &json, 2);
                if escape.starts_with(r#"\ud83d"#) {
                    assert_eq!(read, None, "surrogates go to serde");
                } else {
                    assert_eq!(Ok(read.expect(&json)), serde_answer(&json), "{json}");
                }
            }
        }
    }

    #[test]
    fn the_block_search_finds_the_first_special_byte_anywhere() {
        for length in 0..2 * BLOCK + 8 {
            for place in 0..=length {
                for special in [b'"', b'\\', 0, 0x1f, b'\n'] {
                    let mut bytes = vec![b'a'; length];
                    // Bytes just above the control range and high bytes are plain.
                    bytes.iter_mut().step_by(3).for_each(|b| *b = 0x20);
                    bytes.iter_mut().skip(1).step_by(5).for_each(|b| *b = 0xc3);
                    if place < length {
                        bytes[place] = special;
                    }
                    for from in 0..=place {
                        assert_eq!(special_at_or_after(&bytes, from), place, "{bytes:?} from {from}");
                    }
                }
            }
        }
    }
}
