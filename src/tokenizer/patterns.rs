//! The split patterns of the common byte-level BPE families, in `tokenizers`
//! syntax, in one place: the pre-tokenizer, the rank converter and the
//! scanners all name them from here.

/// GPT-2's split, which `ByteLevel` applies itself when `use_regex` is true.
pub const BYTE_LEVEL_PATTERN: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";

/// Llama-3's split pattern (the `cl100k_base` pattern in `tokenizers` syntax).
pub const LLAMA3_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen2's split pattern: Llama-3's with one number a piece.
pub const QWEN2_PATTERN: &str =
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// GPT-4o's split pattern (`o200k_base`): words split where lower case turns to upper
/// case, contractions kept on their word, and `/` kept after line breaks.
pub const O200K_PATTERN: &str = concat!(
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
);

/// DeepSeek-V3's pre-tokenizer: three `Split`s, each splitting the pieces of the one
/// before: groups of up to three numbers, then runs of CJK ideographs and kana,
/// then the rest by words, punctuation and whitespace. Spelled as its
/// `tokenizer.json` spells them, with line breaks as the characters themselves.
pub const DEEPSEEK_V3_PATTERNS: [&str; 3] = [
    r"\p{N}{1,3}",
    // `[一-龥぀-ゟ゠-ヿ]+`: CJK ideographs, hiragana and katakana.
    "[\u{4e00}-\u{9fa5}\u{3040}-\u{309f}\u{30a0}-\u{30ff}]+",
    concat!(
        r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+"##,
        "|[^\r\n",
        r"\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[",
        "\r\n",
        r"]*|\s*[",
        "\r\n",
        r"]+|\s+(?!\S)|\s+",
    ),
];
