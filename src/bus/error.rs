//! What a bus operation's failure is: async-nats' own error kept as its
//! source, with what was being done.

/// What a bus operation's failure came from: async-nats' own error, whose
/// kind a caller reads by downcasting it (`source()` gives it), or the
/// bus's own words where no library error is behind it.
pub type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A bus operation's failure.
#[derive(Debug, thiserror::Error)]
pub enum BusError {
    /// The server could not be reached.
    #[error("cannot connect to NATS at {url}: {source}")]
    Connect {
        /// The URL tried.
        url: String,
        /// Why.
        #[source]
        source: Cause,
    },
    /// A stream, consumer or bucket could not be created or checked.
    #[error("cannot provision {what}: {source}")]
    Provision {
        /// What was being provisioned.
        what: String,
        /// Why.
        #[source]
        source: Cause,
    },
    /// JetStream could not place the copies `bus.replicas` asks for.
    #[error(
        "cannot provision {what}: {source} (bus.replicas is {replicas}: the cluster needs at least {replicas} JetStream servers up to place that many copies)"
    )]
    Replicas {
        /// What was being provisioned.
        what: String,
        /// `bus.replicas`.
        replicas: usize,
        /// JetStream's refusal.
        #[source]
        source: Cause,
    },
    /// A publish was not acknowledged by JetStream.
    #[error("publish to {subject} failed: {source}")]
    Publish {
        /// The subject.
        subject: String,
        /// Why.
        #[source]
        source: Cause,
    },
    /// The message is larger than the broker carries (its `max_payload`):
    /// sending it again will not help.
    #[error(
        "a message of {size} bytes (and its headers) to {subject} exceeds the broker's max_payload of {max} bytes"
    )]
    TooLarge {
        /// The subject.
        subject: String,
        /// The message's size (payload and headers), in bytes.
        size: usize,
        /// The broker's limit.
        max: usize,
    },
    /// Reading a stream failed.
    #[error("cannot read {what}: {source}")]
    Read {
        /// What was being read.
        what: String,
        /// Why.
        #[source]
        source: Cause,
    },
}

pub(super) fn provision_error<E: Into<Cause>>(
    what: impl Into<String>,
) -> impl FnOnce(E) -> BusError {
    let what = what.into();
    move |e| BusError::Provision {
        what,
        source: e.into(),
    }
}
