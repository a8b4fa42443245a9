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

/// Decodes a byte-level token string; `None` if it has a character outside the alphabet.
pub fn token_to_bytes(token: &str) -> Option<Vec<u8>> {
    static REVERSE: OnceLock<std::collections::HashMap<char, u8>> = OnceLock::new();
    let reverse = REVERSE.get_or_init(|| byte_to_char().iter().enumerate().map(|(b, &c)| (c, b as u8)).collect());
    token.chars().map(|c| reverse.get(&c).copied()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_gpt2_alphabet() {
        assert_eq!(bytes_to_token(b" "), "\u{120}"); // 'Ġ', GPT-2's space
        assert_eq!(bytes_to_token(b"\n"), "\u{10a}"); // 'Ċ'
        assert_eq!(bytes_to_token(b"hi!"), "hi!");
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(token_to_bytes(&bytes_to_token(&all)).unwrap(), all);
        assert_eq!(token_to_bytes("<|endoftext|>").unwrap(), b"<|endoftext|>");
        assert!(token_to_bytes("\u{4e00}").is_none());
    }
}
