//! Whether `tokenizers` writes the canonical form that was assembled from ferry's
//! own reading of a tokenizer (see `canonical`): the comparison, run on a thread
//! of its own while the first documents are encoded, and its memo.
//!
//! Writing GPT-4o's canonical form again takes `tokenizers` 0.12-0.19 s of CPU,
//! in every build of that tokenizer. Where it wrote the assembled form once, it
//! writes it again for the same text under the same ferry and `tokenizers`
//! (`MEMO_VERSION`), so the confirmation is remembered in the cache's memo
//! directory, as the tokenizer's identity is, holding the hash of the form
//! confirmed. A memo is believed as the identity's memo is (a user who can
//! write either could as well have written the entries); one of another hash is
//! ignored, the forms are compared, and it is replaced.

use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;

use crate::cache::memo::HashMemo;

/// How the canonical form `tokenizers` writes compares with an assembled one.
pub enum Written {
    Same,
    /// `tokenizers` writes this text (`None`: it failed to write one).
    Differs(Option<String>),
}

impl Written {
    fn compare(reference: &tokenizers::Tokenizer, assembled: &str) -> Written {
        match reference.to_string(false) {
            Ok(own) if own == assembled => Written::Same,
            Ok(own) => Written::Differs(Some(own)),
            Err(_) => Written::Differs(None),
        }
    }

    /// The comparison, recorded in `memo` when the forms are the same.
    fn compare_and_remember(reference: &tokenizers::Tokenizer, assembled: &str, memo: Option<&Memo>) -> Written {
        let written = Written::compare(reference, assembled);
        if let (Written::Same, Some(memo)) = (&written, memo) {
            memo.record(assembled);
        }
        written
    }
}

/// The memo of a confirmation, as read at the build's start: named for the text
/// of the tokenizer that was parsed (see `Parsed`), holding the hash of the
/// canonical form `tokenizers` was found to write for it.
pub struct Memo(HashMemo);

impl Memo {
    pub fn read(dir: &Path, key: &str) -> Memo {
        Memo(HashMemo::read(dir, key))
    }

    /// Whether `tokenizers` was found to write `assembled` itself.
    fn confirms(&self, assembled: &str) -> bool {
        self.0.hash().is_some_and(|hash| hash == blake3::hash(assembled.as_bytes()))
    }

    fn record(&self, assembled: &str) {
        self.0.write(&blake3::hash(assembled.as_bytes()));
    }
}

/// The comparison of an assembled canonical form with `tokenizers`' own, made on a
/// thread of its own and awaited when needed.
pub struct WrittenCheck {
    /// Until its outcome is taken: the thread comparing.
    thread: Mutex<Option<JoinHandle<Written>>>,
    outcome: OnceLock<Written>,
}

impl WrittenCheck {
    pub fn done(written: Written) -> WrittenCheck {
        WrittenCheck { thread: Mutex::new(None), outcome: OnceLock::from(written) }
    }

    /// Compares here (and remembers a confirmation), unless `memo` confirms already.
    pub fn now(reference: &tokenizers::Tokenizer, assembled: &str, memo: Option<&Memo>) -> WrittenCheck {
        if memo.is_some_and(|memo| memo.confirms(assembled)) {
            return WrittenCheck::done(Written::Same);
        }
        WrittenCheck::done(Written::compare_and_remember(reference, assembled, memo))
    }

    /// Starts comparing, unless `memo` confirms already; where no thread can be
    /// started, compares here.
    pub fn start(reference: &Arc<tokenizers::Tokenizer>, assembled: &Arc<str>, memo: Option<Memo>) -> WrittenCheck {
        if memo.as_ref().is_some_and(|memo| memo.confirms(assembled)) {
            return WrittenCheck::done(Written::Same);
        }
        let (shared, text) = (Arc::clone(reference), Arc::clone(assembled));
        let spawned = std::thread::Builder::new()
            .name("canonical-check".into())
            .spawn(move || Written::compare_and_remember(&shared, &text, memo.as_ref()));
        match spawned {
            Ok(thread) => WrittenCheck { thread: Mutex::new(Some(thread)), outcome: OnceLock::new() },
            // The memo went with the closure; it is only missed this once.
            Err(_) => WrittenCheck::done(Written::compare(reference, assembled)),
        }
    }

    /// Whether the outcome is known without waiting (for tests).
    #[cfg(test)]
    pub fn is_done(&self) -> bool {
        self.outcome.get().is_some()
    }

    pub fn outcome(&self) -> &Written {
        self.outcome.get_or_init(|| {
            let thread = self.thread.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take();
            thread.and_then(|thread| thread.join().ok()).unwrap_or(Written::Differs(None))
        })
    }
}
