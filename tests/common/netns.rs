//! A network namespace for tests that cut a process off the network:
//! joined to this one by a veth pair (`10.<n>.77.1` here, `10.<n>.77.2`
//! inside), removed on drop. Needs root and `ip netns`; `create` says
//! `None` where the machine does not allow it.

/// Runs `ip args`; whether it worked.
fn ip(args: &[&str]) -> bool {
    std::process::Command::new("ip")
        .args(args)
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A network namespace joined to this one by a veth pair, removed on drop.
pub struct Netns {
    /// Its name, for `ip netns exec`.
    pub name: String,
    host_link: String,
}

impl Netns {
    /// `None` when the machine does not allow it (no `ip`, not root).
    pub fn create(n: u8) -> Option<Netns> {
        let id = std::process::id() % 10000;
        // `n` in the names too: two tests of one process may each hold one.
        let name = format!("orch{id}n{n}");
        let (host_link, ns_link) = (format!("oh{id}n{n}"), format!("on{id}n{n}"));
        if !ip(&["netns", "add", &name]) {
            return None;
        }
        let ns = Netns {
            name: name.clone(),
            host_link: host_link.clone(),
        };
        let host_ip = format!("10.{n}.77.1/24");
        let ns_ip = format!("10.{n}.77.2/24");
        let ok = ip(&[
            "link", "add", &host_link, "type", "veth", "peer", "name", &ns_link,
        ]) && ip(&["link", "set", &ns_link, "netns", &name])
            && ip(&["addr", "add", &host_ip, "dev", &host_link])
            && ip(&["link", "set", &host_link, "up"])
            && ip(&["-n", &name, "addr", "add", &ns_ip, "dev", &ns_link])
            && ip(&["-n", &name, "link", "set", &ns_link, "up"])
            && ip(&["-n", &name, "link", "set", "lo", "up"]);
        ok.then_some(ns)
    }

    /// Cuts the link (`false`) or heals it.
    pub fn link(&self, up: bool) {
        assert!(ip(&[
            "link",
            "set",
            &self.host_link,
            if up { "up" } else { "down" }
        ]));
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        ip(&["link", "del", &self.host_link]);
        ip(&["netns", "del", &self.name]);
    }
}
