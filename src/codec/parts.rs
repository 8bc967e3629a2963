//! One JSON object read as several types, each owning some of its
//! members: the settings file is one flat object, its `http_*` and `a2a`
//! members the HTTP face's, the rest the service's. Each part is decoded
//! as [`super::decode`] does, strictly but for the members another part
//! owns, so a member no part knows is still refused, and every error names
//! its field. (serde's `flatten` would do it in one pass, but loses the
//! path of a field that fails to decode.)

use std::fmt;

use serde::Deserializer;
use serde::de::{DeserializeOwned, Visitor};

use super::{DecodeError, Strictness, Validate, decode_sharing};

/// The bytes of one object and the members each of its parts owns.
pub struct Parts<'a> {
    bytes: &'a [u8],
    max_bytes: usize,
    members: Vec<&'static str>,
}

impl<'a> Parts<'a> {
    /// `bytes`, refused over `max_bytes`, made of parts whose members are
    /// `parts` (each from [`fields_of`]).
    pub fn new(bytes: &'a [u8], max_bytes: usize, parts: &[&'static [&'static str]]) -> Self {
        Parts {
            bytes,
            max_bytes,
            members: parts.iter().flat_map(|p| p.iter().copied()).collect(),
        }
    }

    /// The part `T`: strict, but for the other parts' members.
    pub fn decode<T: DeserializeOwned + Validate>(&self) -> Result<T, DecodeError> {
        decode_sharing(
            self.bytes,
            Strictness::Strict,
            self.max_bytes,
            &self.members,
        )
    }
}

/// The member names a struct's derived `Deserialize` knows (as named in
/// the JSON, renames applied); none for anything but a struct.
pub fn fields_of<T: DeserializeOwned>() -> &'static [&'static str] {
    let mut fields: &'static [&'static str] = &[];
    // The probe only answers the struct's question with its field list and
    // stops there: the error is the expected end.
    let _ = T::deserialize(Probe(&mut fields));
    fields
}

/// A deserializer that records the fields a struct asks for, then stops.
struct Probe<'f>(&'f mut &'static [&'static str]);

#[derive(Debug)]
struct Stop;

impl fmt::Display for Stop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the fields are known")
    }
}

impl std::error::Error for Stop {}

impl serde::de::Error for Stop {
    fn custom<M: fmt::Display>(_: M) -> Self {
        Stop
    }
}

impl<'de> Deserializer<'de> for Probe<'_> {
    type Error = Stop;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
        Err(Stop)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Stop> {
        *self.0 = fields;
        Err(Stop)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map enum identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Default, Deserialize, PartialEq)]
    #[serde(default)]
    struct Service {
        data_dir: String,
        bus: Inner,
    }

    #[derive(Debug, Default, Deserialize, PartialEq)]
    #[serde(default, deny_unknown_fields)]
    struct Inner {
        replicas: u32,
    }

    #[derive(Debug, Default, Deserialize, PartialEq)]
    #[serde(default)]
    struct Http {
        #[serde(rename = "http_addr")]
        addr: String,
    }

    impl Validate for Service {
        fn validate(&self) -> Result<(), DecodeError> {
            Ok(())
        }
    }

    impl Validate for Http {
        fn validate(&self) -> Result<(), DecodeError> {
            Ok(())
        }
    }

    fn parts(text: &str) -> Parts<'_> {
        Parts::new(
            text.as_bytes(),
            1 << 20,
            &[fields_of::<Service>(), fields_of::<Http>()],
        )
    }

    #[test]
    fn a_struct_names_its_members_as_the_json_does() {
        assert_eq!(fields_of::<Service>(), ["data_dir", "bus"]);
        assert_eq!(fields_of::<Http>(), ["http_addr"]);
        assert!(fields_of::<u32>().is_empty());
    }

    #[test]
    fn each_part_takes_its_members_and_leaves_the_others() {
        let text = r#"{"data_dir": "d", "http_addr": "a", "bus": {"replicas": 3}}"#;
        let p = parts(text);
        let service: Service = p.decode().unwrap();
        let http: Http = p.decode().unwrap();
        assert_eq!(service.data_dir, "d");
        assert_eq!(service.bus.replicas, 3);
        assert_eq!(http.addr, "a");
    }

    #[test]
    fn a_member_no_part_knows_is_refused_and_a_bad_one_named() {
        let err = parts(r#"{"data_dir": "d", "htp_addr": "a"}"#)
            .decode::<Service>()
            .unwrap_err();
        assert_eq!(
            err,
            DecodeError::UnknownField {
                field: "htp_addr".into()
            }
        );
        let err = parts(r#"{"http_addr": 7}"#).decode::<Http>().unwrap_err();
        assert!(
            matches!(&err, DecodeError::InvalidField { field, .. } if field == "http_addr"),
            "{err:?}"
        );
        // Inside a member, the owner's own strictness holds.
        let err = parts(r#"{"bus": {"replicas": 3, "extra": 1}}"#)
            .decode::<Service>()
            .unwrap_err();
        assert!(err.to_string().contains("extra"), "{err}");
    }
}
