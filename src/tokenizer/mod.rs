//! Tokenizer loading and encoding: a Hugging Face tokenizer (file, vocab + merges,
//! or the embedded GPT-2) as the reference, the guarded fast path beside it, and
//! the BOS/EOS rule.
//!
//! Adding a tokenizer family to the fast path touches this folder only:
//! - recognize its components exactly in `recognize` (anything not reproduced
//!   exactly is an `Unsupported` reason, and the family keeps `tokenizers`);
//! - a split pattern that deserves a scanner goes in `patterns` and `scanner`, with
//!   its pattern added to the scanner's property tests against `fancy-regex` (a
//!   sequence of `Split`s scanned as one, as DeepSeek-V3's, is recognized in
//!   `recognize::scanned_splits` and tested against its patterns run in turn); where
//!   a match's start depends only on a few bytes around it in ASCII text, its rules
//!   as bit operations in `ascii_windows` find the starts of 64 bytes at once;
//! - a new way of turning text into pieces is a `Split` of `fast::FastEncoder`, and
//!   a new manifest name for it an `EncoderKind` in `kind` (`cache` and `prepare`
//!   only ask `is_fast`);
//! - the family goes into `tests/fast_encoder.rs`'s families, trained by Python
//!   `tokenizers` in `tests/python/byte_level_families.py`, so its ids are checked
//!   against Python's on every test document and through `prepare`.

mod added;
mod ascii_windows;
mod bpe;
mod by_rank;
mod bytelevel;
mod canonical;
mod direct_bpe;
mod fast;
mod for_readers;
mod gpt2;
mod kind;
mod patterns;
mod piece_sink;
mod pretokenize;
mod ranks;
mod recognize;
mod scanner;
mod serialized;
mod short_pieces;
mod split_regex;
mod symbols;
mod written;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::cache::memo::memoized_hash;
use crate::errors::{Failure, Fault, caught_quietly};
use crate::hub::{HubError, HubRepo, RepoType};
use crate::spec::Spec;
pub use fast::{FastEncoder, Unsupported};
pub use for_readers::{SpecialTokens, files as reader_files};
pub use gpt2::builtin_tokenizer_json as builtin_gpt2_json;
pub use kind::EncoderKind;
pub use ranks::{Ranks, llama3_style_tokenizer_json};
use written::{Written, WrittenCheck};

#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error(
        "cannot load tokenizer {source_name}: {message}; give a Hugging Face tokenizer.json (or vocab.json + merges.txt), or builtin = \"gpt2\""
    )]
    Load { source_name: String, message: String },
    #[error("unknown builtin tokenizer {0:?}; the embedded one is \"gpt2\"")]
    UnknownBuiltin(String),
    #[error(transparent)]
    Hub(#[from] HubError),
    #[error(
        "tokenizer {source_name} has {vocab_size} tokens, more than output.token_type = \"{token_type}\" holds; use \"int32\" or \"uint32\""
    )]
    VocabTooLarge { source_name: String, vocab_size: u64, token_type: &'static str },
    #[error(
        "tokenizer {source_name} has no token {token:?} (tokenizer.{field}); set tokenizer.{field} to one of its special tokens"
    )]
    MissingSpecial { source_name: String, token: String, field: &'static str },
    #[error(
        "cannot tell the BOS/EOS tokens of {source_name}; set tokenizer.bos_token and tokenizer.eos_token, or ensure_bos_eos = false"
    )]
    UnknownBosEos { source_name: String },
}

/// The tokenizer named by the spec as read, once: the bytes of its files name its
/// memos (see `identity`) and become the text that is parsed, only where it must be.
enum TokenizerBytes {
    Builtin,
    Json(PathBuf, Vec<u8>),
    VocabMerges((PathBuf, Vec<u8>), (PathBuf, Vec<u8>)),
}

impl TokenizerBytes {
    fn read(spec: &Spec) -> Result<TokenizerBytes, TokenizerError> {
        if let Some(name) = &spec.tokenizer.builtin {
            return match name.as_str() {
                "gpt2" => Ok(TokenizerBytes::Builtin),
                _ => Err(TokenizerError::UnknownBuiltin(name.clone())),
            };
        }
        let read = |path: PathBuf, source_name: &dyn Fn() -> String| match fs_err::read(&path) {
            Ok(bytes) => Ok((path, bytes)),
            Err(err) => Err(TokenizerError::Load { source_name: source_name(), message: err.to_string() }),
        };
        Ok(match tokenizer_files(spec)? {
            TokenizerFiles::VocabMerges(vocab, merges) => {
                let source_name = || format!("{} + {}", vocab.display(), merges.display());
                TokenizerBytes::VocabMerges(read(vocab.clone(), &source_name)?, read(merges.clone(), &source_name)?)
            }
            TokenizerFiles::Json(path) => {
                let (path, bytes) = read(path.clone(), &|| path.display().to_string())?;
                TokenizerBytes::Json(path, bytes)
            }
        })
    }

    /// The memo's name for the bytes of the tokenizer's files; `None` for the builtin.
    fn memo_key(&self) -> Option<String> {
        let files: Vec<&[u8]> = match self {
            TokenizerBytes::Builtin => return None,
            TokenizerBytes::Json(_, bytes) => vec![bytes],
            TokenizerBytes::VocabMerges((_, vocab), (_, merges)) => vec![vocab, merges],
        };
        let mut hasher = blake3::Hasher::new();
        hasher.update(b"ferry-tokenizer-identity\0");
        hasher.update(MEMO_VERSION.as_bytes());
        for bytes in files {
            hasher.update(&(bytes.len() as u64).to_le_bytes());
            hasher.update(bytes);
        }
        Some(format!("tokenizer-{}", &hasher.finalize().to_hex()[..32]))
    }

    /// The name of the tokenizer for messages, and its `tokenizer.json` text.
    fn into_text(self) -> Result<(String, String), TokenizerError> {
        match self {
            TokenizerBytes::Builtin => {
                let source_name = "builtin gpt2".to_string();
                let json = gpt2::builtin_tokenizer_json()
                    .map_err(|message| TokenizerError::Load { source_name: source_name.clone(), message })?;
                Ok((source_name, json.to_string()))
            }
            TokenizerBytes::VocabMerges((vocab_path, vocab), (merges_path, merges)) => {
                let source_name = format!("{} + {}", vocab_path.display(), merges_path.display());
                let load_error = |message| TokenizerError::Load { source_name: source_name.clone(), message };
                let text = |path: &Path, bytes| utf8_text(path, bytes).map_err(load_error);
                let (vocab, merges) = (text(&vocab_path, vocab)?, text(&merges_path, merges)?);
                let json = gpt2::tokenizer_json_from_texts((&vocab_path, &vocab), (&merges_path, &merges))
                    .map_err(load_error)?;
                Ok((source_name, json))
            }
            TokenizerBytes::Json(path, bytes) => {
                let source_name = path.display().to_string();
                let json = utf8_text(&path, bytes)
                    .map_err(|message| TokenizerError::Load { source_name: source_name.clone(), message })?;
                Ok((source_name, json))
            }
        }
    }
}

/// A file's bytes as text, checked with SIMD: std's check of GPT-4o's 7.5 MB took
/// 10 ms here (simdutf8's 1 ms), on a build's start before anything is parsed.
fn utf8_text(path: &Path, bytes: Vec<u8>) -> Result<String, String> {
    match simdutf8::basic::from_utf8(&bytes) {
        // SAFETY: just checked to be UTF-8.
        Ok(_) => Ok(unsafe { String::from_utf8_unchecked(bytes) }),
        Err(_) => Err(format!("{} is not UTF-8 text", path.display())),
    }
}

/// Where a tokenizer given by files is, resolved against the spec.
enum TokenizerFiles {
    /// GPT-2's `vocab.json` + `merges.txt`.
    VocabMerges(PathBuf, PathBuf),
    /// A Hugging Face `tokenizer.json`.
    Json(PathBuf),
}

fn tokenizer_files(spec: &Spec) -> Result<TokenizerFiles, TokenizerError> {
    let tokenizer = &spec.tokenizer;
    if let Some(repo) = &tokenizer.hub {
        return hub_tokenizer_files(&HubRepo::new(repo, tokenizer.revision.as_deref(), RepoType::Model)?);
    }
    Ok(match (&tokenizer.vocab, &tokenizer.merges) {
        (Some(vocab), Some(merges)) => TokenizerFiles::VocabMerges(spec.resolve(vocab), spec.resolve(merges)),
        _ => TokenizerFiles::Json(spec.resolve(tokenizer.path.as_deref().unwrap_or(Path::new("tokenizer.json")))),
    })
}

/// A hub model's `tokenizer.json`, or else its `vocab.json` + `merges.txt` (models
/// such as GPT-2's first uploads ship only those).
fn hub_tokenizer_files(repo: &HubRepo) -> Result<TokenizerFiles, TokenizerError> {
    if let Some(json) = repo.file("tokenizer.json") {
        return Ok(TokenizerFiles::Json(json));
    }
    match (repo.file("vocab.json"), repo.file("merges.txt")) {
        (Some(vocab), Some(merges)) => Ok(TokenizerFiles::VocabMerges(vocab, merges)),
        _ => Err(repo.not_cached("tokenizer.json (or vocab.json + merges.txt)", " tokenizer.json").into()),
    }
}

/// A `tokenizer.json` read from an entry (`source_name` for messages), for decoding.
pub fn from_json(source_name: &str, json: &str) -> Result<tokenizers::Tokenizer, TokenizerError> {
    parse(source_name, json)
}

/// Parses a `tokenizer.json`. The tokenizers crate panics, rather than failing,
/// on a syntax error inside some sections (its decoder's `expect`): a panic
/// becomes an error, and its report is not printed. Where parsing fails, the JSON
/// syntax is checked, so that a syntax error is named as one wherever it is. The
/// check comes only then: it is a scan of the whole file, a few hundredths of a
/// second of every build's start for a large vocabulary.
fn parse(source_name: &str, json: &str) -> Result<tokenizers::Tokenizer, TokenizerError> {
    let load_error = |message: String| TokenizerError::Load { source_name: source_name.to_string(), message };
    let failure = match caught_quietly(|| parse_bpe_directly(json).map_or_else(|| json.parse(), Ok)) {
        Ok(Ok(tokenizer)) => return Ok(tokenizer),
        Ok(Err(err)) => err.to_string(),
        Err(panic) => format!("the tokenizers library failed on it: {panic}"),
    };
    if let Err(err) = serde_json::from_str::<serde::de::IgnoredAny>(json) {
        return Err(load_error(format!("it is not valid JSON: {err}")));
    }
    Err(load_error(failure))
}

/// A tokenizer whose model is BPE, parsed with a deserializer of that model.
/// `tokenizers` reads any model through an untagged wrapper that first copies it
/// whole into two generic trees (serde's buffer, then a `serde_json::Value`): for a
/// 200k vocabulary that is a fifth of the parse time and most of a start's peak
/// memory. The model's own deserializer copies the merges into such a tree too,
/// so `DirectBpe` reads them (see there). The result is the same `Tokenizer` (its
/// tests compare the canonical forms); `None` for any other model, or any error,
/// which the general parse then reports in its own words.
fn parse_bpe_directly(json: &str) -> Option<tokenizers::Tokenizer> {
    use tokenizers::{DecoderWrapper, NormalizerWrapper, PostProcessorWrapper, PreTokenizerWrapper, TokenizerImpl};
    type BpeTokenizer = TokenizerImpl<
        direct_bpe::DirectBpe,
        NormalizerWrapper,
        PreTokenizerWrapper,
        PostProcessorWrapper,
        DecoderWrapper,
    >;
    serde_json::from_str::<BpeTokenizer>(json).ok().map(tokenizers::Tokenizer::from)
}

/// The spec's tokenizer, parsed, with its canonical serialization and its fast
/// encoder. A run that builds needs it twice, for the fingerprint (when not
/// memoized) and for the encoders; parsing a large tokenizer and writing its
/// canonical form take about a tenth of a second each, so it is done once and
/// handed on.
pub struct Parsed {
    source_name: String,
    tokenizer: tokenizers::Tokenizer,
    /// What this build's `tokenizers` writes for it: formatting of the file and
    /// fields left to their defaults do not matter.
    canonical: String,
    /// Whether `canonical` was assembled from ferry's own reading of the vocabulary
    /// and merges (see `canonical`), not yet compared with what `tokenizers` writes.
    assembled: bool,
    /// The memo's name for a confirmation of `canonical`, used where it is
    /// `assembled`; `None` when the fast path is off.
    confirmed_memo_key: Option<String>,
    /// One more than the largest id, added tokens included (see `vocab_size`).
    vocab_size: u64,
    /// `None` when the spec turns the fast path off.
    fast: Option<Result<FastEncoder, Unsupported>>,
}

impl Parsed {
    pub fn read(spec: &Spec) -> Result<Parsed, TokenizerError> {
        Parsed::from_bytes(spec, TokenizerBytes::read(spec)?)
    }

    fn from_bytes(spec: &Spec, bytes: TokenizerBytes) -> Result<Parsed, TokenizerError> {
        let (source_name, json) = bytes.into_text()?;
        let load_error = |err: tokenizers::Error| TokenizerError::Load {
            source_name: source_name.clone(),
            message: err.to_string(),
        };
        std::thread::scope(|scope| {
            // Without a thread to spare (a process limit), the encoder is built after the parse.
            let provisional = spec
                .tokenizer
                .fast_path
                .then(|| std::thread::Builder::new().spawn_scoped(scope, || fast::Provisional::build(&json)).ok());
            let tokenizer = parse(&source_name, &json)?;
            // Named while the provisional encoder is still being built.
            let memo_key = spec.tokenizer.fast_path.then(|| confirmed_memo_key(&json));
            // `None` inside: the fast path is on, but there is no provisional encoder.
            let provisional = provisional.map(|thread| thread.and_then(|thread| thread.join().ok()).flatten());
            let assembled = provisional.as_ref().and_then(|provisional| {
                let provisional = provisional.as_ref()?;
                Some((provisional.assembled_canonical(&tokenizer)?, provisional.largest_model_id()))
            });
            let (canonical, assembled, vocab_size) = match assembled {
                // Counting the ids `tokenizers` holds took 0.03 s (GPT-4o's), right
                // before the first document: ferry's reading has the largest.
                Some((text, largest_model_id)) => (text, true, vocab_size_given(&tokenizer, largest_model_id)),
                None => {
                    let (canonical, size) = written_canonical_and_vocab_size(&tokenizer);
                    (canonical.map_err(load_error)?, false, size)
                }
            };
            let fast = provisional.map(|provisional| match provisional {
                Some(provisional) if assembled => provisional.into_built(),
                Some(provisional) => provisional.confirm(&canonical),
                None => FastEncoder::for_tokenizer_json(&canonical),
            });
            Ok(Parsed {
                source_name: source_name.clone(),
                tokenizer,
                canonical,
                assembled,
                confirmed_memo_key: memo_key,
                vocab_size,
                fast,
            })
        })
    }
}

/// The canonical form `tokenizers` writes, and `vocab_size`, counted meanwhile:
/// each takes hundredths of a second for a large vocabulary.
fn written_canonical_and_vocab_size(tokenizer: &tokenizers::Tokenizer) -> (tokenizers::Result<String>, u64) {
    std::thread::scope(|scope| {
        let counting = std::thread::Builder::new().spawn_scoped(scope, || vocab_size(tokenizer)).ok();
        let canonical = tokenizer.to_string(false);
        let size = match counting.map(|thread| thread.join()) {
            Some(Ok(size)) => size,
            _ => vocab_size(tokenizer),
        };
        (canonical, size)
    })
}

/// The tokenizer's identity for the fingerprint: a hash of its canonical
/// serialization, so formatting of the file does not matter. Parsing a large
/// tokenizer takes a good part of a second and a cache hit runs at every job
/// start, so the identity is memoized in `memo_dir`, keyed by the bytes it comes
/// from. When it had to parse the tokenizer, it leaves it in `parsed` for `Encoders`.
pub fn identity(spec: &Spec, memo_dir: &Path, parsed: &mut Option<Parsed>) -> Result<blake3::Hash, TokenizerError> {
    if spec.tokenizer.builtin.as_deref() == Some("gpt2") {
        // The embedded vocabulary only changes with ferry's FORMAT_VERSION.
        return Ok(blake3::hash(b"ferry builtin tokenizer gpt2 (tiktoken r50k_base)"));
    }
    // Read once: for the memo's name, and for the parse where the memo has no answer.
    let bytes = TokenizerBytes::read(spec)?;
    let key = bytes.memo_key();
    let canonical_hash = || {
        let tokenizer = Parsed::from_bytes(spec, bytes)?;
        let hash = blake3::hash(tokenizer.canonical.as_bytes());
        *parsed = Some(tokenizer);
        Ok(hash)
    };
    match key {
        Some(key) => memoized_hash(memo_dir, &key, canonical_hash),
        None => canonical_hash(),
    }
}

/// What a memo of a tokenizer (its identity, a confirmation of its canonical form)
/// depends on besides the tokenizer's bytes: ferry's reading of it, and the
/// `tokenizers` that writes its canonical form. Raise the reading's count when
/// ferry's reading of a tokenizer changes; a test keeps the `tokenizers` version
/// the one in Cargo.lock.
const MEMO_VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "/tokenizers 0.23.2/reading 1");

/// The memo's name for a confirmation that `tokenizers` writes the canonical form
/// assembled from `json`, the text parsed (see `written`).
fn confirmed_memo_key(json: &str) -> String {
    let mut hasher = blake3::Hasher::new();
    hasher.update(b"ferry-tokenizer-confirmed\0");
    hasher.update(MEMO_VERSION.as_bytes());
    hasher.update(json.as_bytes());
    format!("tokenizer-confirmed-{}", &hasher.finalize().to_hex()[..32])
}

/// Gives the memory that parsing a tokenizer freed back to the system. Parsing
/// a large one allocates and frees some tens of MB (the file, the canonical form,
/// temporary maps). The `ferry` binary allocates with mimalloc, which returns
/// freed memory itself (see `main.rs`); where glibc's allocator is the one (the
/// library in benches and tests, and C code such as zstd's), glibc keeps freed
/// memory in its heap, and a build's resident memory would stay that much higher
/// for its whole run.
fn release_freed_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free pages of glibc's heaps to the system.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Tokens to put around every document.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BosEos {
    pub prepend: Option<u32>,
    pub append: Option<u32>,
}

/// A loaded tokenizer with everything needed to encode documents.
pub struct Encoders {
    pub source_name: String,
    reference: Arc<tokenizers::Tokenizer>,
    /// The reference's canonical serialization (shared with `written`'s thread).
    serialized: Arc<str>,
    /// Whether `tokenizers` writes `serialized` itself, where it was assembled.
    written: WrittenCheck,
    fast: Option<FastEncoder>,
    /// Why the fast path is off, when it is.
    pub fast_unavailable: Option<String>,
    add_special_tokens: bool,
    pub bos_eos: BosEos,
    pub vocab_size: u64,
    /// What padded rows are padded with: the tokenizer's pad token, else EOS.
    pub pad_id: Option<u32>,
    pub special: SpecialTokens,
}

impl Encoders {
    /// The spec's tokenizer, with nothing remembered from earlier builds.
    pub fn load(spec: &Spec) -> Result<Encoders, TokenizerError> {
        Encoders::from_parsed(spec, Parsed::read(spec)?, None)
    }

    /// The encoders of the spec's tokenizer, already parsed (by `identity` or
    /// `Parsed::read`); with `memo_dir`, a confirmation that `tokenizers` writes
    /// the assembled canonical form is taken from there, or left there (see `written`).
    pub fn from_parsed(spec: &Spec, parsed: Parsed, memo_dir: Option<&Path>) -> Result<Encoders, TokenizerError> {
        let Parsed {
            source_name,
            tokenizer: mut reference,
            canonical,
            assembled,
            confirmed_memo_key,
            vocab_size,
            fast,
        } = parsed;
        let load_error = |err: &dyn std::fmt::Display| TokenizerError::Load {
            source_name: source_name.clone(),
            message: err.to_string(),
        };
        let memo = || Some(written::Memo::read(memo_dir?, confirmed_memo_key.as_deref()?));
        let pad_id = pad_token(&reference);
        // Truncation or padding stored in a tokenizer.json would silently cut or pad
        // documents; packing is ferry's job. Readers get the tokenizer as encoding used it.
        let plain = reference.get_truncation().is_none() && reference.get_padding().is_none();
        let mut written = WrittenCheck::done(Written::Same);
        if assembled && !plain {
            // Rare; compared here, before the settings go.
            written = WrittenCheck::now(&reference, &canonical, memo().as_ref());
        }
        let serialized: Arc<str> = if plain {
            canonical.into()
        } else {
            reference.with_truncation(None).map_err(|err| load_error(&err))?;
            reference.with_padding(None);
            reference.to_string(false).map_err(|err| load_error(&err))?.into()
        };
        let reference = Arc::new(reference);
        if assembled && plain {
            written = WrittenCheck::start(&reference, &serialized, memo());
        }
        let token_type = spec.output.token_type;
        if vocab_size > token_type.max_vocab() {
            return Err(TokenizerError::VocabTooLarge { source_name, vocab_size, token_type: token_type.dtype() });
        }
        let add_special_tokens = spec.tokenizer.add_special_tokens;
        let bos_eos = if spec.tokenizer.ensure_bos_eos {
            bos_eos_to_add(spec, &source_name, &reference)?
        } else {
            BosEos::default()
        };

        let (fast, fast_unavailable) = match fast.map(|fast| checked_fast_encoder(&reference, fast, add_special_tokens))
        {
            None => (None, Some("tokenizer.fast_path = false".to_string())),
            Some(Ok(fast)) => (Some(fast), None),
            Some(Err(Unsupported(reason))) => (None, Some(reason)),
        };
        let special = special_tokens(spec, &reference);
        let pad_id = pad_id.or_else(|| special.eos.as_deref().and_then(|eos| reference.token_to_id(eos)));
        release_freed_heap();
        Ok(Encoders {
            source_name,
            reference,
            serialized,
            written,
            fast,
            fast_unavailable,
            add_special_tokens,
            bos_eos,
            vocab_size,
            pad_id,
            special,
        })
    }

    /// The files an entry carries so that `transformers` and `tokenizers` load its
    /// tokenizer offline from the staged copy (see `for_readers`).
    pub fn files_for_readers(&self, model_max_length: Option<usize>) -> Result<Vec<(&'static str, String)>, String> {
        let serialized: &str = match self.written.outcome() {
            Written::Differs(Some(own)) => own,
            _ => &self.serialized,
        };
        for_readers::files(serialized, &self.special, model_max_length)
    }

    /// Whether the fast encoder, built from ferry's own reading of the tokenizer,
    /// reads its vocabulary and merges as `tokenizers` does: they are the text the
    /// canonical form was assembled from, and `tokenizers` writes that same text.
    /// Waits for the comparison, which runs while the first documents are encoded;
    /// a build checks this before it publishes what the fast encoder made.
    pub fn fast_path_confirmed(&self) -> bool {
        matches!(self.written.outcome(), Written::Same)
    }

    pub fn fast_available(&self) -> bool {
        self.fast.is_some()
    }

    /// The kind of the fast encoder, when there is one.
    pub fn fast_kind(&self) -> Option<EncoderKind> {
        self.fast.as_ref().map(FastEncoder::kind)
    }

    /// Ids of one document with the reference encoder, before BOS/EOS.
    pub fn encode_reference(&self, text: &str) -> Result<Vec<u32>, EncodeError> {
        self.reference.encode_fast(text, self.add_special_tokens).map(|e| e.get_ids().to_vec()).map_err(EncodeError)
    }

    /// Ids of one document with the chosen encoder, before BOS/EOS.
    pub fn encode(&self, text: &str, kind: EncoderKind) -> Result<Vec<u32>, EncodeError> {
        if kind.is_fast()
            && let Some(ids) = self.fast.as_ref().and_then(|fast| fast.encode(text))
        {
            return Ok(ids);
        }
        self.encode_reference(text)
    }

    /// Frees the encoders on another thread: a large vocabulary's maps take
    /// hundredths of a second to free (GPT-4o's about 0.07 s), which the end of
    /// a build need not wait for and a process that exits first skips. Where no
    /// thread can be started, they are freed here.
    pub fn free_in_background(self) {
        let _ = std::thread::Builder::new().name("free-encoders".into()).spawn(move || drop(self));
    }

    /// Wraps ids in the BOS/EOS tokens the rule asks for, in place: a copy into a
    /// new vector cost every document an allocation, often of fresh pages.
    pub fn with_bos_eos(&self, mut ids: Vec<u32>) -> Vec<u32> {
        let BosEos { prepend, append } = self.bos_eos;
        ids.reserve(usize::from(prepend.is_some()) + usize::from(append.is_some()));
        if let Some(id) = prepend {
            ids.insert(0, id);
        }
        ids.extend(append);
        ids
    }
}

/// One more than the tokenizer's largest id, added tokens included. It is found
/// without the tokenizer's map of its whole vocabulary: building and freeing that
/// map of 200k strings took a tenth of a second of every build's start (GPT-4o's).
/// A model whose ids are not exactly `0..count` (holes, or two tokens on one id)
/// takes the long way.
fn vocab_size(reference: &tokenizers::Tokenizer) -> u64 {
    use tokenizers::Model;
    let model = reference.get_model();
    let count = model.get_vocab_size() as u32;
    let model_max = if (0..count).all(|id| model.id_to_token(id).is_some()) {
        count.checked_sub(1)
    } else {
        reference.get_vocab(false).into_values().max()
    };
    vocab_size_given(reference, model_max)
}

/// `vocab_size` where the model's largest id is known to be `model_max`.
fn vocab_size_given(reference: &tokenizers::Tokenizer, model_max: Option<u32>) -> u64 {
    let added_max = reference.get_added_tokens_decoder().into_keys().max();
    model_max.max(added_max).map_or(0, |max| max as u64 + 1)
}

/// The fast path is valid only where the reference's post-processor adds nothing.
fn checked_fast_encoder(
    reference: &tokenizers::Tokenizer,
    fast: Result<FastEncoder, Unsupported>,
    add_special_tokens: bool,
) -> Result<FastEncoder, Unsupported> {
    let unsupported = |err: &dyn std::fmt::Display| Unsupported(err.to_string());
    if add_special_tokens {
        let with = reference.encode_fast(PROBE_TEXT, true).map_err(|e| unsupported(&e))?;
        let without = reference.encode_fast(PROBE_TEXT, false).map_err(|e| unsupported(&e))?;
        if with.get_ids() != without.get_ids() {
            return Err(Unsupported("the post-processor adds special tokens".into()));
        }
    }
    fast
}

/// The reference tokenizer failed on a document.
#[derive(Debug, thiserror::Error)]
#[error("the tokenizer failed")]
pub struct EncodeError(#[source] tokenizers::Error);

impl Failure for EncodeError {
    fn fault(&self) -> Fault {
        Fault::Internal
    }
}

const PROBE_TEXT: &str = "Hello world!";

/// BOS and EOS tokens of the tokenizer families in use, tried in order when the spec
/// does not name them.
const BOS_CANDIDATES: &[&str] = &["<s>", "<bos>", "<|begin_of_text|>", "<|endoftext|>", "[CLS]"];
const EOS_CANDIDATES: &[&str] = &["</s>", "<eos>", "<|end_of_text|>", "<|endoftext|>", "[SEP]"];
/// Pad tokens by the names released tokenizers give them (T5 and Llama-2 ports,
/// BERT, Qwen2's, Llama-3.1's reserved one).
const PAD_CANDIDATES: &[&str] = &["<pad>", "[PAD]", "<|pad|>", "<|padding|>", "<|finetune_right_pad_id|>"];

/// The tokenizer's pad token: the one its padding settings name, else the first
/// it knows by a pad token's usual name.
fn pad_token(reference: &tokenizers::Tokenizer) -> Option<u32> {
    reference
        .get_padding()
        .map(|padding| padding.pad_id)
        .or_else(|| PAD_CANDIDATES.iter().find_map(|candidate| reference.token_to_id(candidate)))
}

/// The BOS and EOS tokens' text, for readers of the entry: as the spec names them, else
/// the first candidate the vocabulary holds.
fn special_tokens(spec: &Spec, reference: &tokenizers::Tokenizer) -> SpecialTokens {
    let known = |token: &str| reference.token_to_id(token).is_some();
    let pick = |configured: &Option<String>, candidates: &[&str]| match configured {
        Some(token) => known(token).then(|| token.clone()),
        None => candidates.iter().find(|candidate| known(candidate)).map(|c| c.to_string()),
    };
    SpecialTokens {
        bos: pick(&spec.tokenizer.bos_token, BOS_CANDIDATES),
        eos: pick(&spec.tokenizer.eos_token, EOS_CANDIDATES),
    }
}

/// Epochraft's `ensure_bos_eos`: find what the tokenizer already adds to a probe
/// text, then add only what is missing; when BOS and EOS are the same token
/// (GPT-2, GPT-NeoX) one is enough, and it is appended.
fn bos_eos_to_add(spec: &Spec, source_name: &str, reference: &tokenizers::Tokenizer) -> Result<BosEos, TokenizerError> {
    let find = |field: &'static str,
                configured: &Option<String>,
                candidates: &[&str]|
     -> Result<Option<u32>, TokenizerError> {
        match configured {
            Some(token) => reference.token_to_id(token).map(Some).ok_or_else(|| TokenizerError::MissingSpecial {
                source_name: source_name.to_string(),
                token: token.clone(),
                field,
            }),
            None => Ok(candidates.iter().find_map(|c| reference.token_to_id(c))),
        }
    };
    let bos = find("bos_token", &spec.tokenizer.bos_token, BOS_CANDIDATES)?;
    let eos = find("eos_token", &spec.tokenizer.eos_token, EOS_CANDIDATES)?;
    let (Some(bos), Some(eos)) = (bos, eos) else {
        return Err(TokenizerError::UnknownBosEos { source_name: source_name.to_string() });
    };
    let probe = reference
        .encode_fast(PROBE_TEXT, spec.tokenizer.add_special_tokens)
        .map_err(|err| TokenizerError::Load { source_name: source_name.to_string(), message: err.to_string() })?;
    let ids = probe.get_ids();
    let bos_added = ids.first() == Some(&bos);
    let eos_added = ids.last() == Some(&eos);
    Ok(if bos == eos {
        BosEos { prepend: None, append: (!bos_added && !eos_added).then_some(eos) }
    } else {
        BosEos { prepend: (!bos_added).then_some(bos), append: (!eos_added).then_some(eos) }
    })
}

impl Failure for TokenizerError {
    fn fault(&self) -> Fault {
        match self {
            TokenizerError::Hub(hub) => hub.fault(),
            _ => Fault::Cause,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::TokenType;
    use serde_json::Value;
    use std::path::Path;

    fn gpt2_spec(extra: &str) -> Spec {
        let text = format!("name='t'\n[splits]\ntrain='x'\n[tokenizer]\nbuiltin='gpt2'\n{extra}");
        Spec::parse(&text, Path::new("t.toml"), PathBuf::from(".")).unwrap()
    }

    #[test]
    fn a_syntax_error_inside_the_decoder_is_an_error_not_a_panic() {
        // The tokenizers crate panics on this one (found by fuzz/tokenizer).
        let broken = r#"{"version": "1.0", "decoder": {"type": "ByteLevel", "add_prefix_space": true,}}"#;
        let err = parse("broken/tokenizer.json", broken).unwrap_err().to_string();
        assert!(err.contains("broken/tokenizer.json") && err.contains("not valid JSON"), "{err}");
    }

    #[test]
    fn bpe_parsed_directly_is_the_tokenizer_the_general_parse_gives() {
        let gpt2: Value = serde_json::from_str(builtin_gpt2_json().unwrap()).unwrap();
        let mut legacy_merges = gpt2.clone();
        let pairs = gpt2["model"]["merges"].as_array().unwrap();
        legacy_merges["model"]["merges"] = pairs
            .iter()
            .map(|pair| Value::from(format!("{} {}", pair[0].as_str().unwrap(), pair[1].as_str().unwrap())))
            .collect();
        let mut sentencepiece_like = gpt2.clone();
        let model = &mut sentencepiece_like["model"];
        (model["byte_fallback"], model["fuse_unk"], model["unk_token"]) =
            (true.into(), true.into(), "<|endoftext|>".into());
        sentencepiece_like["normalizer"] = serde_json::json!({"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]});
        sentencepiece_like["truncation"] =
            serde_json::json!({"direction": "Left", "max_length": 7, "strategy": "LongestFirst", "stride": 1});
        sentencepiece_like["added_tokens"].as_array_mut().unwrap().push(serde_json::json!(
            {"id": 50257, "content": "new word", "single_word": true, "lstrip": true, "rstrip": false, "normalized": true, "special": false}));
        for (name, json) in [
            ("gpt2", gpt2.clone()),
            ("legacy merges", legacy_merges.clone()),
            ("sentencepiece-like", sentencepiece_like),
        ] {
            let json = json.to_string();
            let direct = parse_bpe_directly(&json).unwrap_or_else(|| panic!("{name}: not parsed directly"));
            let general: tokenizers::Tokenizer = json.parse().unwrap();
            assert_eq!(direct.to_string(false).unwrap(), general.to_string(false).unwrap(), "{name}");
            let text = "a new word, ünïcödé and <|endoftext|> here";
            let ids = |tokenizer: &tokenizers::Tokenizer| tokenizer.encode(text, true).unwrap().get_ids().to_vec();
            assert_eq!(ids(&direct), ids(&general), "{name}");
        }
        // Spellings the direct parse leaves to the general one, which takes them as before.
        let mut version_line = legacy_merges.clone();
        version_line["model"]["merges"].as_array_mut().unwrap().insert(0, "#version: 0.2".into());
        let mut settings = gpt2.clone();
        (settings["model"]["dropout"], settings["model"]["ignore_merges"]) = (0.25.into(), true.into());
        let mut unknown_key = gpt2.clone();
        unknown_key["model"]["a key it does not know"] = 1.into();
        let mut both_ways = gpt2.clone();
        both_ways["model"]["merges"].as_array_mut().unwrap()[5] = "a b".into();
        let mut three_tokens = gpt2.clone();
        three_tokens["model"]["merges"].as_array_mut().unwrap()[5] = serde_json::json!(["a", "b", "c"]);
        for (name, json, direct_reads) in [
            ("a #version line", version_line, true),
            ("model settings", settings, true),
            ("an unknown key", unknown_key, false),
            ("merges both ways", both_ways, false),
            ("a merge of three tokens", three_tokens, false),
        ] {
            let json = json.to_string();
            let direct = parse_bpe_directly(&json);
            let general = json.parse::<tokenizers::Tokenizer>().ok();
            assert_eq!(direct.is_some(), direct_reads, "{name}");
            if let (Some(direct), Some(general)) = (&direct, &general) {
                assert_eq!(direct.to_string(false).unwrap(), general.to_string(false).unwrap(), "{name}");
            }
            assert!(direct.is_none() || general.is_some(), "{name}: read here, refused by tokenizers");
        }
        let word_level = r#"{"version":"1.0","model":{"type":"WordLevel","vocab":{"[UNK]":0},"unk_token":"[UNK]"}}"#;
        assert!(parse_bpe_directly(word_level).is_none());
        assert!(parse("word-level.json", word_level).is_ok(), "other models take the general parse");
    }

    #[test]
    fn identity_is_memoized_by_file_bytes_and_ignores_formatting() {
        let dir = tempfile::tempdir().unwrap();
        let memo_dir = dir.path().join("memo");
        let spec_for = |json: &str, name: &str| {
            std::fs::write(dir.path().join(name), json).unwrap();
            let text = format!("name='t'\n[splits]\ntrain='x'\n[tokenizer]\npath='{name}'\n");
            Spec::parse(&text, &dir.path().join("t.toml"), dir.path().to_path_buf()).unwrap()
        };
        let compact = r#"{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":null,"pre_tokenizer":{"type":"Whitespace"},"post_processor":null,"decoder":null,"model":{"type":"WordLevel","vocab":{"a":0,"b":1,"[UNK]":2},"unk_token":"[UNK]"}}"#;
        let value: Value = serde_json::from_str(compact).unwrap();
        let pretty = serde_json::to_string_pretty(&value).unwrap();

        let first = identity(&spec_for(compact, "compact.json"), &memo_dir, &mut None).unwrap();
        assert_eq!(identity(&spec_for(&pretty, "pretty.json"), &memo_dir, &mut None).unwrap(), first);
        assert_eq!(std::fs::read_dir(&memo_dir).unwrap().count(), 2, "one memo per distinct file");

        // A memo that says otherwise is believed: the second call parsed nothing.
        let key = TokenizerBytes::read(&spec_for(compact, "compact.json")).unwrap().memo_key();
        let memo = memo_dir.join(key.unwrap());
        let planted = blake3::hash(b"planted");
        std::fs::write(&memo, planted.to_hex().as_bytes()).unwrap();
        assert_eq!(identity(&spec_for(compact, "compact.json"), &memo_dir, &mut None).unwrap(), planted);

        let changed = compact.replace(r#""b":1"#, r#""c":1"#);
        let mut parsed = None;
        assert_ne!(identity(&spec_for(&changed, "compact.json"), &memo_dir, &mut parsed).unwrap(), first);
        assert!(parsed.is_some(), "a tokenizer parsed for its identity is handed on");
        let mut parsed = None;
        identity(&spec_for(&changed, "compact.json"), &memo_dir, &mut parsed).unwrap();
        assert!(parsed.is_none(), "a memoized identity parses nothing");
    }

    #[test]
    fn a_confirmed_canonical_form_is_remembered_and_a_memo_of_another_is_not_believed() {
        let dir = tempfile::tempdir().unwrap();
        let memo_dir = dir.path().join("memo");
        std::fs::write(dir.path().join("tokenizer.json"), builtin_gpt2_json().unwrap()).unwrap();
        let text = "name='t'\n[splits]\ntrain='x'\n[tokenizer]\npath='tokenizer.json'\n";
        let spec = Spec::parse(text, &dir.path().join("t.toml"), dir.path().to_path_buf()).unwrap();
        let load = || Encoders::from_parsed(&spec, Parsed::read(&spec).unwrap(), Some(&memo_dir)).unwrap();
        let memo = memo_dir.join(confirmed_memo_key(builtin_gpt2_json().unwrap()));

        let first = load();
        assert!(!first.written.is_done(), "the first build compares the forms on a thread");
        assert!(first.fast_path_confirmed());
        let hash = blake3::hash(first.serialized.as_bytes()).to_hex();
        assert_eq!(std::fs::read_to_string(&memo).unwrap(), hash.as_str());
        let second = load();
        assert!(second.written.is_done() && second.fast_path_confirmed(), "the next build takes the memo");
        assert!(!Encoders::load(&spec).unwrap().written.is_done(), "without a memo directory, it compares");

        // A memo of another form (a damaged one, or one planted for another text) is
        // not believed: the forms are compared again, and it is replaced.
        std::fs::write(&memo, blake3::hash(b"planted").to_hex().as_bytes()).unwrap();
        let third = load();
        assert!(!third.written.is_done());
        assert!(third.fast_path_confirmed());
        assert_eq!(std::fs::read_to_string(&memo).unwrap(), hash.as_str());

        // Where `tokenizers` writes another form, nothing is remembered.
        let mut duplicated: Value = serde_json::from_str(builtin_gpt2_json().unwrap()).unwrap();
        duplicated["model"]["vocab"]["zz-the-again"] = duplicated["model"]["vocab"]["the"].clone();
        std::fs::write(dir.path().join("tokenizer.json"), duplicated.to_string()).unwrap();
        let differing = load();
        assert!(!differing.fast_path_confirmed());
        assert!(!memo_dir.join(confirmed_memo_key(&duplicated.to_string())).exists());
    }

    #[test]
    fn the_memos_name_the_tokenizers_version_in_cargo_lock() {
        let lock = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.lock")).unwrap();
        let version = lock
            .split("[[package]]")
            .find_map(|package| package.strip_prefix("\nname = \"tokenizers\"\nversion = \""))
            .and_then(|rest| rest.split('"').next())
            .unwrap();
        assert!(MEMO_VERSION.contains(&format!("/tokenizers {version}/")), "{MEMO_VERSION} against {version}");
    }

    #[test]
    fn truncation_stored_in_the_tokenizer_cuts_nothing_and_readers_get_it_off() {
        let dir = tempfile::tempdir().unwrap();
        let mut json: Value = serde_json::from_str(builtin_gpt2_json().unwrap()).unwrap();
        json["truncation"] =
            serde_json::json!({"direction": "Right", "max_length": 2, "strategy": "LongestFirst", "stride": 0});
        std::fs::write(dir.path().join("tokenizer.json"), json.to_string()).unwrap();
        let text = "name='t'\n[splits]\ntrain='x'\n[tokenizer]\npath='tokenizer.json'\nensure_bos_eos=false\n";
        let spec = Spec::parse(text, &dir.path().join("t.toml"), dir.path().to_path_buf()).unwrap();
        let encoders = Encoders::load(&spec).unwrap();
        assert!(encoders.fast_available());
        let text = "a text of more than two tokens";
        let fast = encoders.encode(text, EncoderKind::FastBytelevelBpe).unwrap();
        assert_eq!(fast, encoders.encode_reference(text).unwrap());
        assert!(fast.len() > 2, "{fast:?}");
        let files = encoders.files_for_readers(None).unwrap();
        let for_readers: Value = serde_json::from_str(&files[0].1).unwrap();
        assert_eq!(for_readers["truncation"], Value::Null);
        assert_eq!(for_readers["model"]["merges"], json["model"]["merges"]);
    }

    #[test]
    fn gpt2_known_ids_and_single_eos() {
        let encoders = Encoders::load(&gpt2_spec("")).unwrap();
        assert!(encoders.fast_available(), "{:?}", encoders.fast_unavailable);
        // GPT-2 ids of "Hello world!" are [15496, 995, 0].
        for kind in [EncoderKind::FastBytelevelBpe, EncoderKind::Tokenizers] {
            assert_eq!(encoders.encode("Hello world!", kind).unwrap(), vec![15496, 995, 0]);
        }
        assert_eq!(encoders.bos_eos, BosEos { prepend: None, append: Some(50256) });
        assert_eq!(encoders.with_bos_eos(vec![1, 2]), vec![1, 2, 50256]);
        assert_eq!(encoders.vocab_size, 50257);
    }

    #[test]
    fn bos_and_eos_wrap_the_ids_in_place() {
        let mut encoders = Encoders::load(&gpt2_spec("")).unwrap();
        for (prepend, append, expected) in
            [(Some(7), Some(9), vec![7, 1, 2, 3, 9]), (Some(7), None, vec![7, 1, 2, 3]), (None, None, vec![1, 2, 3])]
        {
            encoders.bos_eos = BosEos { prepend, append };
            assert_eq!(encoders.with_bos_eos(vec![1, 2, 3]), expected);
            assert_eq!(
                encoders.with_bos_eos(Vec::new()),
                expected.iter().copied().filter(|&id| id > 3).collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn added_special_token_in_text_matches_reference() {
        let encoders = Encoders::load(&gpt2_spec("")).unwrap();
        let text = "a<|endoftext|> b  \n\n  c's   d";
        let fast = encoders.encode(text, EncoderKind::FastBytelevelBpe).unwrap();
        assert_eq!(fast, encoders.encode_reference(text).unwrap());
        assert!(fast.contains(&50256));
    }

    #[test]
    fn vocab_size_is_one_more_than_the_largest_id_of_the_whole_vocabulary() {
        let size = |vocab: &str, added_id: Option<u32>| {
            let added = added_id.map_or(String::new(), |id| {
                format!(r#"{{"id":{id},"content":"<x>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}}"#)
            });
            let json = format!(
                r#"{{"version":"1.0","added_tokens":[{added}],"model":{{"type":"WordLevel","vocab":{vocab},"unk_token":"a"}}}}"#
            );
            let tokenizer = from_json("t", &json).unwrap();
            let whole_map = tokenizer.get_vocab(true).into_values().max().map_or(0, |max| max as u64 + 1);
            assert_eq!(vocab_size(&tokenizer), whole_map, "{json}");
            whole_map
        };
        assert_eq!(size(r#"{"a":0,"b":1}"#, None), 2);
        assert_eq!(size(r#"{"a":0,"b":1}"#, Some(2)), 3);
        size(r#"{"a":0,"b":1}"#, Some(9));
        assert_eq!(size(r#"{"a":0,"b":5}"#, None), 6, "a hole in the model's ids");
        size(r#"{"a":0,"b":5}"#, Some(7));
        assert_eq!(size(r#"{"a":0,"b":0,"c":1}"#, None), 2, "two tokens on one id");
        assert_eq!(size(r#"{"a":3}"#, None), 4);
    }

    #[test]
    fn uint16_refused_when_vocabulary_does_not_fit_but_gpt2_fits() {
        let spec = gpt2_spec("[output]\ntoken_type='uint16'\n");
        assert!(Encoders::load(&spec).is_ok());
        assert_eq!(TokenType::Uint16.max_vocab(), 65536);
    }

    #[test]
    fn missing_configured_eos_is_named() {
        let err = Encoders::load(&gpt2_spec("eos_token='</s>'\n")).err().unwrap().to_string();
        assert!(err.contains("</s>") && err.contains("eos_token"), "{err}");
    }
}
