//! The settings file (`--config FILE`, JSON, every member optional): one
//! flat object, composed here of the service's part
//! ([`ServiceSettings`]) and the HTTP face's ([`HttpSettings`]: the
//! `http_*` members and `a2a`), each read strictly; a member neither part
//! knows is refused.

use serde::Serialize;

use crate::codec::{self, DecodeError, Parts};
use crate::http::HttpSettings;
use crate::service::ServiceSettings;

/// The orchestrator's settings: the service's and the HTTP face's.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Settings {
    /// What the service runs with.
    #[serde(flatten)]
    pub service: ServiceSettings,
    /// What the HTTP API and the A2A face run with.
    #[serde(flatten)]
    pub http: HttpSettings,
}

impl Settings {
    /// Reads a settings file's bytes: each part strictly, every error
    /// naming its member.
    pub fn decode(bytes: &[u8]) -> Result<Settings, DecodeError> {
        let parts = Parts::new(
            bytes,
            codec::DEFAULT_MAX_BYTES,
            &[
                codec::fields_of::<ServiceSettings>(),
                codec::fields_of::<HttpSettings>(),
            ],
        );
        Ok(Settings {
            service: parts.decode()?,
            http: parts.decode()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The defaults printed in docs/operations.md are the defaults, and
    /// every member there is one the strict reader knows.
    #[test]
    fn the_documented_configuration_is_the_default() {
        let page = include_str!("../../docs/operations.md");
        let block = page
            .split("```json\n")
            .nth(1)
            .and_then(|rest| rest.split("```").next())
            .expect("a JSON block in docs/operations.md");
        let documented = Settings::decode(block.as_bytes()).unwrap();
        assert_eq!(documented, Settings::default());
    }

    #[test]
    fn each_part_gets_its_members_and_an_unknown_one_is_refused() {
        let text = br#"{"data_dir": "/d", "http_addr": "0.0.0.0:9000", "a2a": {"name": "n"}}"#;
        let s = Settings::decode(text).unwrap();
        assert_eq!(s.service.data_dir, std::path::PathBuf::from("/d"));
        assert_eq!(s.http.addr.port(), 9000);
        assert_eq!(s.http.a2a.name, "n");
        let err = Settings::decode(br#"{"http_adr": "0.0.0.0:9000"}"#).unwrap_err();
        assert_eq!(
            err,
            DecodeError::UnknownField {
                field: "http_adr".into()
            }
        );
        let err = Settings::decode(br#"{"http_max_in_flight": 0}"#).unwrap_err();
        assert!(err.to_string().contains("http_max_in_flight"), "{err}");
    }

    /// Written out, the settings are the flat file they were read from.
    #[test]
    fn written_out_they_read_back_the_same() {
        let mut s = Settings::default();
        s.http.max_in_flight = 7;
        s.service.max_backlog = 9;
        let text = serde_json::to_vec(&s).unwrap();
        assert!(String::from_utf8_lossy(&text).contains("\"http_max_in_flight\":7"));
        assert_eq!(Settings::decode(&text).unwrap(), s);
    }
}
