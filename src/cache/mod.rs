//! The on-disk cache and destinations: paths, memos, entry files, manifests,
//! build progress and staging state files.

pub mod build_progress;
pub mod claims;
pub mod destination;
pub mod formats;
pub mod hashed_file;
pub mod layout;
pub mod lease;
pub mod liveness;
pub mod lookup;
pub mod manifest;
pub mod memo;
pub mod publish;
pub mod staging;
pub mod token_store;
pub mod writer;
