//! GPT-2's byte-level alphabet: every byte maps to one printable character, so
//! byte-level BPE vocabularies are stored as strings.

use std::sync::OnceLock;

/// The character standing for each byte (GPT-2 `bytes_to_unicode`).
pub fn byte_to_char() -> &'static [char; 256] {
    static TABLE: OnceLock<[char; 256]> = OnceLock::new();
    TABLE.get_or_init(|| {
        let printable = |b: u32| (0x21..=0x7e).contains(&b) || (0xa1..=0xac).contains(&b) || (0xae..=0xff).contains(&b);
        let mut table = ['\0'; 256];
        let mut next_unprintable = 0;
        for byte in 0..256u32 {
            let code = if printable(byte) {
                byte
            } else {
                next_unprintable += 1;
                255 + next_unprintable
            };
            table[byte as usize] = char::from_u32(code).expect("codes below 0x200 are valid chars");
        }
        table
    })
}

/// Encodes raw bytes as a byte-level token string.
pub fn bytes_to_token(bytes: &[u8]) -> String {
    let table = byte_to_char();
    bytes.iter().map(|&b| table[b as usize]).collect()
}

/// Decodes a byte-level token string into `bytes`, emptied first: false if a
/// character is outside the alphabet. Decoding a large vocabulary is on the path to the first
/// document (GPT-4o's 200k tokens), so it reads a table by code, not a map.
pub fn decode_token_into(token: &str, bytes: &mut Vec<u8>) -> bool {
    bytes.clear();
    let reverse = char_to_byte();
    token.chars().all(|c| match reverse.get(c as usize) {
        Some(&code) if code <= u16::from(u8::MAX) => {
            bytes.push(code as u8);
            true
        }
        _ => false,
    })
}

/// The byte of each character of the alphabet by its code (all below 0x200),
/// `NOT_A_BYTE` for every other.
fn char_to_byte() -> &'static [u16; 0x200] {
    static TABLE: OnceLock<[u16; 0x200]> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut table = [NOT_A_BYTE; 0x200];
        for (byte, &c) in byte_to_char().iter().enumerate() {
            table[c as usize] = byte as u16;
        }
        table
    })
}

const NOT_A_BYTE: u16 = u16::MAX;

#[cfg(test)]
mod tests {
    use super::*;

    fn token_to_bytes(token: &str) -> Option<Vec<u8>> {
        let mut bytes = Vec::new();
        decode_token_into(token, &mut bytes).then_some(bytes)
    }

    #[test]
    fn matches_gpt2_alphabet() {
        assert_eq!(bytes_to_token(b" "), "\u{120}"); // 'Ġ', GPT-2's space
        assert_eq!(bytes_to_token(b"\n"), "\u{10a}"); // 'Ċ'
        assert_eq!(bytes_to_token(b"hi!"), "hi!");
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(token_to_bytes(&bytes_to_token(&all)).unwrap(), all);
        assert_eq!(token_to_bytes("<|endoftext|>").unwrap(), b"<|endoftext|>");
        assert!(token_to_bytes("\u{4e00}").is_none());
        // Characters just past the alphabet, and one below it that is not in it.
        assert!(token_to_bytes("a\u{144}").is_none());
        assert!(token_to_bytes("\u{1ff}").is_none());
        assert!(token_to_bytes(" ").is_none());
    }
}
