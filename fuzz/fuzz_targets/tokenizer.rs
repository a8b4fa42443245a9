//! `tokenizer.json` loading on any file, the fast encoder's recognition included:
//! a tokenizer or an error, never a panic; a loaded one encodes, and the fast
//! encoder, when it claims the tokenizer, gives the tokenizer's own ids.
#![no_main]

use std::path::Path;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;

use ferry::cache::manifest::EncoderKind;
use ferry::spec::Spec;
use ferry::tokenizer::Encoders;

fn dir() -> &'static Path {
    static DIR: OnceLock<std::path::PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("ferry-fuzz-tokenizer-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    })
}

const SPEC: &str = "name = \"fuzz\"\n[splits]\ntrain = [\"x.jsonl\"]\n[tokenizer]\npath = \"tokenizer.json\"\n\
                    ensure_bos_eos = false\n[output]\ntoken_type = \"uint32\"\n";
const TEXT: &str = "Hello, world! 12345 naïve café 日本語 <|endoftext|>  tabs\tand\nlines";

fuzz_target!(|bytes: &[u8]| {
    std::fs::write(dir().join("tokenizer.json"), bytes).unwrap();
    let spec = Spec::parse(SPEC, &dir().join("spec.toml"), dir().to_path_buf()).unwrap();
    let Ok(encoders) = Encoders::load(&spec) else { return };
    let Ok(reference) = encoders.encode(TEXT, EncoderKind::Tokenizers) else { return };
    if encoders.fast_available() {
        let fast = encoders.encode(TEXT, EncoderKind::FastBytelevelBpe).unwrap();
        assert_eq!(fast, reference, "the fast encoder claimed a tokenizer it does not reproduce");
    }
});
