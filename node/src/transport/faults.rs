//! Fault injection for tests, in the spirit of raft-rs' test harness: rules that drop or delay
//! requests between peers, cut a peer off, or flip a bit of the next stolen task. Every random
//! choice comes from one seeded generator, so a failing run replays from its seed
//! (`PLEXUS_FAULT_SEED`, printed by the tests). A transport without faults installed pays one
//! relaxed atomic load per request.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Duration;

use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

/// Which requests a rule applies to: from one endpoint to another (`None` matches any).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// Sending peer (`None`: any sender, clients included).
    pub from: Option<u64>,
    /// Receiving peer (`None`: any receiver).
    pub to: Option<u64>,
}

impl Route {
    fn matches(&self, from: Option<u64>, to: Option<u64>) -> bool {
        self.from.is_none_or(|f| Some(f) == from) && self.to.is_none_or(|t| Some(t) == to)
    }
}

/// What happens to one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Delivered (after the delay, if any).
    Deliver(Duration),
    /// Lost: the caller sees the peer as unreachable.
    Drop,
}

#[derive(Debug)]
struct State {
    rng: ChaCha8Rng,
    drops: Vec<(Route, f64)>,
    delays: Vec<(Route, Duration, Duration)>,
    /// Peers cut off from every other peer (both directions).
    isolated: BTreeSet<u64>,
    /// Stolen tasks still to be tampered with.
    tamper: u32,
    tampered: u32,
    dropped: u64,
}

/// The fault rules of one process's transports (shared by every in-process peer).
#[derive(Debug)]
pub struct Faults {
    seed: u64,
    state: Mutex<State>,
}

impl Faults {
    /// No rules yet; random choices from `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            state: Mutex::new(State {
                rng: ChaCha8Rng::seed_from_u64(seed),
                drops: Vec::new(),
                delays: Vec::new(),
                isolated: BTreeSet::new(),
                tamper: 0,
                tampered: 0,
                dropped: 0,
            }),
        }
    }

    /// The seed the rules draw from.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Drops requests on `route` with probability `p`.
    pub fn drop_requests(&self, route: Route, p: f64) {
        self.state().drops.push((route, p));
    }

    /// Delays requests on `route` by a uniform time in `[min, max]`.
    pub fn delay_requests(&self, route: Route, min: Duration, max: Duration) {
        self.state().delays.push((route, min, max));
    }

    /// Cuts `peer` off from every other peer until [`Faults::heal`].
    pub fn isolate(&self, peer: u64) {
        self.state().isolated.insert(peer);
    }

    /// Removes every rule (isolation included).
    pub fn heal(&self) {
        let mut s = self.state();
        s.drops.clear();
        s.delays.clear();
        s.isolated.clear();
    }

    /// Flips one bit of each of the next `n` stolen tasks a thief receives.
    pub fn tamper_next_steals(&self, n: u32) {
        self.state().tamper += n;
    }

    /// How many stolen tasks were tampered with so far.
    pub fn tampered(&self) -> u32 {
        self.state().tampered
    }

    /// How many requests were dropped so far.
    pub fn dropped(&self) -> u64 {
        self.state().dropped
    }

    /// The fate of a request from `from` to `to` (peer ids; `None` for clients or unknown).
    pub fn verdict(&self, from: Option<u64>, to: Option<u64>) -> Verdict {
        let mut s = self.state();
        let cut = |p: Option<u64>| p.is_some_and(|p| s.isolated.contains(&p));
        if from.is_some() && to.is_some() && from != to && (cut(from) || cut(to)) {
            s.dropped += 1;
            return Verdict::Drop;
        }
        let drop_p: f64 = s
            .drops
            .iter()
            .filter(|(r, _)| r.matches(from, to))
            .map(|(_, p)| *p)
            .fold(0.0, f64::max);
        if drop_p > 0.0 && unit(&mut s.rng) < drop_p {
            s.dropped += 1;
            return Verdict::Drop;
        }
        let delay = s
            .delays
            .iter()
            .find(|(r, _, _)| r.matches(from, to))
            .map(|(_, lo, hi)| (*lo, *hi));
        match delay {
            Some((lo, hi)) => {
                let span = hi.saturating_sub(lo).as_secs_f64();
                let d = lo + Duration::from_secs_f64(span * unit(&mut s.rng));
                Verdict::Deliver(d)
            }
            None => Verdict::Deliver(Duration::ZERO),
        }
    }

    /// Flips a random bit of `sealed` if a tamper rule is pending; returns whether it did.
    pub fn tamper(&self, sealed: &mut [u8]) -> bool {
        let mut s = self.state();
        if s.tamper == 0 || sealed.is_empty() {
            return false;
        }
        s.tamper -= 1;
        s.tampered += 1;
        let bit = s.rng.next_u64() as usize % (sealed.len() * 8);
        sealed[bit / 8] ^= 1 << (bit % 8);
        true
    }
}

/// A uniform draw in [0, 1).
fn unit(rng: &mut ChaCha8Rng) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_replays_the_same_choices() {
        let run = |seed| {
            let f = Faults::new(seed);
            f.drop_requests(
                Route {
                    from: None,
                    to: Some(2),
                },
                0.5,
            );
            (0..64)
                .map(|_| f.verdict(Some(1), Some(2)) == Verdict::Drop)
                .collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
        let drops = run(7).iter().filter(|d| **d).count();
        assert!((16..48).contains(&drops), "{drops} of 64 dropped at p=0.5");
    }

    #[test]
    fn an_isolated_peer_reaches_nobody_until_healed() {
        let f = Faults::new(1);
        f.isolate(3);
        assert_eq!(f.verdict(Some(3), Some(1)), Verdict::Drop);
        assert_eq!(f.verdict(Some(1), Some(3)), Verdict::Drop);
        assert_eq!(
            f.verdict(Some(1), Some(2)),
            Verdict::Deliver(Duration::ZERO)
        );
        f.heal();
        assert_eq!(
            f.verdict(Some(3), Some(1)),
            Verdict::Deliver(Duration::ZERO)
        );
    }

    #[test]
    fn tampering_flips_exactly_one_bit_per_rule() {
        let f = Faults::new(5);
        let mut a = vec![0u8; 40];
        assert!(!f.tamper(&mut a));
        f.tamper_next_steals(1);
        assert!(f.tamper(&mut a));
        assert_eq!(a.iter().map(|b| b.count_ones()).sum::<u32>(), 1);
        assert!(!f.tamper(&mut a));
        assert_eq!(f.tampered(), 1);
    }
}
