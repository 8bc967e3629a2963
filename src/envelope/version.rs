//! The wire format's version: the one number this build reads and writes.

use serde::{Deserialize, Serialize};

/// The one envelope version this build reads and writes.
pub const VERSION: u32 = 1;

/// The wire format version number; only [`VERSION`] deserializes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "u32", into = "u32")]
pub struct Version;

/// A wire format version this build does not read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("version {0} is not supported (expected {VERSION})")]
pub struct UnsupportedVersion(pub u32);

impl TryFrom<u32> for Version {
    type Error = UnsupportedVersion;
    fn try_from(v: u32) -> Result<Self, Self::Error> {
        if v == VERSION {
            Ok(Version)
        } else {
            Err(UnsupportedVersion(v))
        }
    }
}

impl From<Version> for u32 {
    fn from(_: Version) -> u32 {
        VERSION
    }
}
