//! The broker's addresses: one NATS URL or several (the nodes of a
//! cluster). `NATS_URL` and `--nats-url` take them comma-separated, the
//! settings file as a string the same way or as a list.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::envelope::ParseError;

/// One or more NATS server URLs, in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Servers(Vec<String>);

impl Servers {
    /// The URLs, as given.
    pub fn urls(&self) -> &[String] {
        &self.0
    }

    /// The addresses the client connects to.
    pub fn addrs(&self) -> Vec<async_nats::ServerAddr> {
        // Each was parsed when the list was made.
        self.0.iter().filter_map(|u| u.parse().ok()).collect()
    }
}

impl FromStr for Servers {
    type Err = ParseError;

    /// `nats://a:4222,nats://b:4222` (spaces around commas are fine); a
    /// URL without a scheme is `nats://`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Servers::from_list(s.split(','))
    }
}

impl Servers {
    fn from_list<'a>(urls: impl IntoIterator<Item = &'a str>) -> Result<Servers, ParseError> {
        let mut out = Vec::new();
        for url in urls.into_iter().map(str::trim) {
            if url.is_empty() {
                continue;
            }
            url.parse::<async_nats::ServerAddr>()
                .map_err(|e| ParseError::NotServerUrl {
                    url: url.into(),
                    why: e.to_string(),
                })?;
            out.push(url.to_string());
        }
        if out.is_empty() {
            return Err(ParseError::NoServers);
        }
        Ok(Servers(out))
    }
}

impl fmt::Display for Servers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.join(","))
    }
}

impl Serialize for Servers {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0.as_slice() {
            [one] => s.serialize_str(one),
            many => many.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Servers {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Given {
            One(String),
            Many(Vec<String>),
        }
        let parsed = match Given::deserialize(d)? {
            Given::One(s) => s.parse(),
            Given::Many(list) => Servers::from_list(list.iter().map(String::as_str)),
        };
        parsed.map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_is_read_from_commas_or_json_and_bad_urls_are_named() {
        let s: Servers = "nats://a:4222, nats://b:4223,,nats://c:4224"
            .parse()
            .unwrap();
        assert_eq!(
            s.urls(),
            ["nats://a:4222", "nats://b:4223", "nats://c:4224"]
        );
        assert_eq!(s.to_string(), "nats://a:4222,nats://b:4223,nats://c:4224");
        assert_eq!(s.addrs().len(), 3);
        let from_json: Servers =
            serde_json::from_str(r#"["nats://a:4222","nats://b:4223","nats://c:4224"]"#).unwrap();
        assert_eq!(from_json, s);
        let one: Servers = serde_json::from_str(r#""nats://a:4222""#).unwrap();
        assert_eq!(serde_json::to_string(&one).unwrap(), r#""nats://a:4222""#);
        assert_eq!(
            serde_json::to_string(&s).unwrap(),
            r#"["nats://a:4222","nats://b:4223","nats://c:4224"]"#
        );
        let bad = "nats://a:4222,nats://b:notaport"
            .parse::<Servers>()
            .unwrap_err();
        assert!(
            matches!(&bad, ParseError::NotServerUrl { url, .. } if url == "nats://b:notaport"),
            "{bad}"
        );
        assert_eq!(" , ".parse::<Servers>().unwrap_err(), ParseError::NoServers);
        assert!(serde_json::from_str::<Servers>("[]").is_err());
    }
}
