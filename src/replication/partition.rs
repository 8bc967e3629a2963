//! Which partition holds what. The log, the lease, the store and the
//! snapshots are per partition; one partition serves everything today.
//! This is the rule a later change spreads partitions over several leaders
//! by, fixed now so that neither ids nor keys need a new format then.
//!
//! With `n` partitions:
//! - a task's (or run's) partition is its id's last two bytes read as a
//!   big-endian u16, modulo `n` (those bytes are random in a UUIDv7);
//! - an idempotency key's partition is the 64-bit FNV-1a hash of its
//!   scope, one zero byte and the key, modulo `n`;
//! - a task submitted with a key is minted in its key's partition (its
//!   id's last two bytes chosen so), so a retry finds the claim and the
//!   task in one place; a run's steps and messages are minted in the run's
//!   partition; anything else keeps the partition its random id gives it;
//! - a claim made before there were several partitions may name a task in
//!   another partition: the claim is found by the key's rule, the task by
//!   its id's.

use crate::envelope::TaskId;

/// The most partitions the rule can name (one per value of two bytes).
pub const MAX_PARTITIONS: u32 = 1 << 16;

/// A deployment's partitions, numbered `0..count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Partitions {
    count: u32,
}

impl Partitions {
    /// `count` partitions (1 to [`MAX_PARTITIONS`]); `None` otherwise.
    pub fn new(count: u32) -> Option<Partitions> {
        (1..=MAX_PARTITIONS)
            .contains(&count)
            .then_some(Partitions { count })
    }

    /// How many there are.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// The partition of the task or run with id `id`.
    pub fn of_id(&self, id: TaskId) -> u32 {
        let b = id.as_bytes();
        u32::from(u16::from_be_bytes([b[14], b[15]])) % self.count
    }

    /// The partition of idempotency key `key` in scope `scope`.
    pub fn of_key(&self, scope: &str, key: &str) -> u32 {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in scope.bytes().chain([0]).chain(key.bytes()) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
        (hash % u64::from(self.count)) as u32
    }

    /// A fresh id (a UUIDv7 for now) in partition `partition` (taken
    /// modulo the count): its last two bytes, random in a UUIDv7, are
    /// moved to the nearest value below them in that partition.
    pub fn mint(&self, partition: u32) -> TaskId {
        let partition = partition % self.count;
        let mut bytes = *TaskId::new().as_bytes();
        let random = u32::from(u16::from_be_bytes([bytes[14], bytes[15]]));
        let mut low = random - random % self.count + partition;
        if low > u32::from(u16::MAX) {
            low -= self.count;
        }
        let low = u16::try_from(low).unwrap_or(u16::MAX).to_be_bytes();
        bytes[14] = low[0];
        bytes[15] = low[1];
        TaskId::from_bytes(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An id minted in a partition is in it by the id rule, for every
    /// partition of several counts, and stays a UUIDv7.
    #[test]
    fn an_id_minted_in_a_partition_is_in_it() {
        for count in [1, 2, 3, 7, 64, 1000, MAX_PARTITIONS] {
            let p = Partitions::new(count).unwrap();
            for partition in (0..count).step_by((count as usize / 50).max(1)) {
                for _ in 0..20 {
                    let id = p.mint(partition);
                    assert_eq!(p.of_id(id), partition, "count {count}");
                    let uuid = uuid::Uuid::from_bytes(*id.as_bytes());
                    assert_eq!(uuid.get_version_num(), 7);
                }
            }
        }
    }

    /// The key rule is the documented hash: fixed values another
    /// implementation can check itself against.
    #[test]
    fn the_key_rule_is_fnv1a_of_scope_zero_key() {
        let p = Partitions::new(MAX_PARTITIONS).unwrap();
        // FNV-1a 64 of "" is the offset basis; of "\0" one step of it.
        let basis: u64 = 0xcbf2_9ce4_8422_2325;
        let zero = basis.wrapping_mul(0x0000_0100_0000_01b3);
        assert_eq!(u64::from(p.of_key("", "")), zero % 65536);
        // Vectors in docs/store.md: FNV-1a 64 of "a\0b" is
        // 0xe5d29919042666b2, of "default\0order-42" 0x91dcdeacf390ec0b.
        assert_eq!(p.of_key("a", "b"), 0x66b2);
        assert_eq!(p.of_key("default", "order-42"), 0xec0b);
        assert_eq!(Partitions::new(3).unwrap().of_key("default", "order-42"), 1);
        let one = Partitions::new(1).unwrap();
        assert_eq!(one.of_key("alice", "k1"), 0);
        assert_eq!(one.of_id(TaskId::new()), 0);
        assert!(Partitions::new(0).is_none());
        assert!(Partitions::new(MAX_PARTITIONS + 1).is_none());
    }
}
