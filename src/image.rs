//! Images: consistent copies of a ledger, their manifests, verification, publish and restore.
//!
//! STUB — to be written (foundation issue). The signatures below are the agreed API.
#![allow(missing_docs, unused_variables)]

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::durable::{DurableStore, StoreError};
use crate::ids::LeaseKey;
use crate::layout::ImageRef;
use crate::ledger::LedgerError;

pub const FORMAT_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    #[error("{what} is corrupt: {reason}")]
    Corrupt { what: String, reason: String },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error("i/o: {0}")]
    Io(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    pub key: String,
    pub epoch: u64,
    pub seq: u64,
    pub size: u64,
    pub sha256: String,
    pub base: Option<ImageRef>,
    pub created_at_ms: u64,
}

impl Manifest {
    pub fn image_ref(&self) -> ImageRef {
        ImageRef { epoch: self.epoch, seq: self.seq, sha256: self.sha256.clone() }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageFile {
    pub path: PathBuf,
    pub size: u64,
    pub sha256: String,
}

pub fn take_image(db_path: &Path, dest: &Path) -> Result<ImageFile, ImageError> {
    todo!()
}

pub async fn upload_image(
    store: &dyn DurableStore,
    key: &LeaseKey,
    epoch: u64,
    seq: u64,
    image: &ImageFile,
    base: Option<ImageRef>,
    created_at_ms: u64,
) -> Result<Manifest, ImageError> {
    todo!()
}

pub async fn fetch_restorable(
    store: &dyn DurableStore,
    key: &LeaseKey,
    head: Option<&ImageRef>,
    floor: u64,
) -> Result<Option<(Manifest, Vec<u8>)>, ImageError> {
    todo!()
}

pub fn install_image(bytes: &[u8], ledger_path: &Path) -> Result<(), ImageError> {
    todo!()
}
