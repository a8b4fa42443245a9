//! The on-disk cache: paths, the input-hash memo, entry files and manifests.

pub mod formats;
pub mod layout;
pub mod lease;
pub mod manifest;
pub mod memo;
pub mod writer;
