//! ferry: tokenize text corpora once into a fingerprint-addressed cache, derive
//! from it the training rows (views) that Hugging Face `datasets.load_from_disk`
//! and other trainers read as is, and stage them onto Slurm nodes' local disks fast.
//!
//! The cache holds two kinds of entry. A token store is what tokenizing makes:
//! every document's ids, fingerprinted by the inputs, the tokenizer and the
//! tokenization part of the spec. A view is everything after: packing, lengths,
//! columns, shuffle and formats, fingerprinted by its token store and the rest of
//! the spec, made from the token store without opening an input.
//!
//! # Layout
//!
//! Lower layers never depend on higher ones.
//!
//! - `fsutil`: atomic writes, no-replace renames, exclusive create, free space; `untrusted`:
//!   directories others may write, opened and changed without following symlinks, and bounded reads.
//! - `fingerprint`: the stable blake3 fingerprints of token stores and views.
//! - `errors`: the one path-carrying I/O error, and an error with its causes as one line.
//! - `spec`: the pipeline spec (TOML) and its canonical form.
//! - `cache`: on-disk formats and paths: `layout` (every path of a cache), `destination`
//!   (a staging destination and its lock), `memo`, `hashed_file` (the one way a recorded file is
//!   written), `token_store` (a token store's documents: Megatron's document-level `.bin`/`.idx`),
//!   `writer` (Arrow + `datasets` files), `manifest` (an entry's record: its kind, files,
//!   inputs, encoder), `build_progress`, `claims` (exclusive-create claims shared by builders),
//!   `lookup`, `publish` (an assembly renamed into `entries/`), `staging` (a destination's
//!   state files), `lease`, `formats` (Megatron indexed datasets and flat token files beside
//!   a view's Arrow files).
//! - `hub`: files of model and dataset repos in the local Hugging Face hub cache, offline.
//! - `inputs`: split globs (or hub files) to input files; their content hashes through the memo.
//! - `source`: streaming readers for JSON lines (plain, zstd, gzip) and Parquet.
//! - `tokenizer`: tokenizer loading, the guarded fast byte-level BPE encoder (added tokens, NFC,
//!   split regexes, merges with a per-thread cache), BOS/EOS rules.
//! - `view`: a view derived from a token store: `plan` and `best_fit` (rows as pieces of
//!   documents, from their lengths), `shuffle`, `gather` (a row's tokens from the store's
//!   files), `write` (units of rows as Arrow files and format parts), `assemble`; `interleave`
//!   (a mixture's rows, by weight) and `blend` (a mixture's Megatron files and blend).
//! - `megatron_args`: Megatron's `--data-path` for an entry where it lies (cache or node).
//! - `readers`: the formats an entry holds and the Python that opens each with its trainer's reader.
//! - `mixture`: mixture specs, their components resolved to token stores, and their prepare.
//! - `prepare`: a spec's token store, built and published unless it exists, then its view:
//!   `together` (the claims loop shared by every task building the store), `shard` + `pipeline`
//!   (one shard read, encoded and written at once), `record` (the manifest), `publish`.
//! - `stage`: mirror the cache into a node-local destination and copy the active entry
//!   (`plan`, `guard` (free space, the destination lock), `mirror`, `copy`, `landing`, `report`,
//!   `command`; its state files live in `cache::staging`).
//! - `status`, `gc`, `verify`: what the cache holds; eviction by policy; re-hashing against manifests.
//! - `daemon`: the per-node agent (tokio, Unix socket protocol, metrics); `settings`'s socket.
//! - `corpus`: synthetic Pile-style corpora for the demo, tests and benchmarks.
//! - `progress`: progress bars and periodic log lines.
//! - `ticker`: a closure run periodically on a thread (heartbeats, state files).
//! - `settings`: effective settings (flag > environment > site config > default) and their sources.
//! - `cli`, `commands`: argument parsing and the commands; the only code that prints to stdout.

#![warn(clippy::too_many_lines)]

pub mod cache;
pub mod cli;
pub mod commands;
pub mod corpus;
pub mod daemon;
pub mod errors;
pub mod fingerprint;
pub mod fsutil;
pub mod gc;
pub mod hub;
pub mod huge_pages;
pub mod inputs;
pub mod inspect;
pub mod megatron_args;
pub mod mixture;
pub mod prepare;
pub mod progress;
pub mod readers;
pub mod settings;
pub mod source;
pub mod spec;
pub mod stage;
pub mod status;
pub mod ticker;
pub mod tokenizer;
pub mod verify;
pub mod view;
