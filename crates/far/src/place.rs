//! Placement: rendezvous (highest-random-weight) hashing.
//!
//! Every slot ranks every server by `score(server, slot)`, a 64-bit mix of the server's
//! seed (a hash of its address, so the ranking does not depend on the order servers are
//! given in) and the slot. A slot's copies go to the first `replicas` servers of its ranking
//! that are up. When a server is lost, only the slots that had it among their chosen move,
//! each to the next server of its own ranking; when one is added, only the slots that rank it
//! above one of their chosen: about `replicas / n` of them either way, spread evenly over the
//! others. No table, no virtual nodes.

use std::net::SocketAddr;

/// splitmix64's finaliser: a bijective 64-bit mix.
pub(crate) fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A server's seed: a hash of its address (IP and port).
pub(crate) fn seed_of(addr: &SocketAddr) -> u64 {
    let ip = match addr.ip() {
        std::net::IpAddr::V4(v4) => u64::from(u32::from(v4)),
        std::net::IpAddr::V6(v6) => {
            let bits = u128::from(v6);
            (bits as u64) ^ mix((bits >> 64) as u64)
        }
    };
    mix(mix(ip) ^ u64::from(addr.port()))
}

/// The score of a server (by seed) for a slot.
pub(crate) fn score(seed: u64, slot: u64) -> u64 {
    mix(seed ^ mix(slot.wrapping_add(0x9e37_79b9_7f4a_7c15)))
}

/// Server indices in `slot`'s ranking, best first, into `out` (its first `seeds.len()`
/// entries); returns how many.
pub(crate) fn rank(seeds: &[u64], slot: u64, out: &mut [u8; crate::MAX_SERVERS]) -> usize {
    let n = seeds.len();
    let mut scores = [0u64; crate::MAX_SERVERS];
    for (i, &seed) in seeds.iter().enumerate() {
        scores[i] = score(seed, slot);
        out[i] = i as u8;
    }
    out[..n].sort_unstable_by(|&a, &b| scores[b as usize].cmp(&scores[a as usize]));
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seeds(n: u16) -> Vec<u64> {
        (0..n).map(|i| seed_of(&SocketAddr::from(([127, 0, 0, 1], 11211 + i)))).collect()
    }

    /// The first `r` servers of each slot's ranking among `alive`.
    fn chosen(seeds: &[u64], alive: &[bool], slot: u64, r: usize) -> Vec<u8> {
        let mut order = [0u8; crate::MAX_SERVERS];
        let n = rank(seeds, slot, &mut order);
        order[..n].iter().copied().filter(|&s| alive[s as usize]).take(r).collect()
    }

    #[test]
    fn losing_a_server_moves_only_its_slots() {
        let seeds = seeds(5);
        let (all, mut lost) = (vec![true; 5], vec![true; 5]);
        lost[2] = false;
        let (mut moved, slots) = (0, 20_000u64);
        let mut firsts = [0u32; 5];
        for slot in 0..slots {
            let before = chosen(&seeds, &all, slot, 2);
            let after = chosen(&seeds, &lost, slot, 2);
            firsts[before[0] as usize] += 1;
            let kept: Vec<u8> = before.iter().copied().filter(|&s| s != 2).collect();
            assert!(kept.iter().all(|s| after.contains(s)), "a surviving copy moved");
            moved += usize::from(before.contains(&2));
        }
        // Server 2 held about 2/5 of the slots: those, and only those, got a new copy.
        let share = moved as f64 / slots as f64;
        assert!((share - 0.4).abs() < 0.03, "{share}");
        for count in firsts {
            let share = f64::from(count) / slots as f64;
            assert!((share - 0.2).abs() < 0.02, "uneven: {firsts:?}");
        }
    }

    #[test]
    fn the_ranking_does_not_depend_on_the_order_servers_are_given_in() {
        let a = seeds(4);
        let mut b = a.clone();
        b.reverse();
        for slot in 0..100 {
            let (mut ra, mut rb) = ([0u8; crate::MAX_SERVERS], [0u8; crate::MAX_SERVERS]);
            rank(&a, slot, &mut ra);
            rank(&b, slot, &mut rb);
            assert_eq!(a[ra[0] as usize], b[rb[0] as usize]);
        }
    }
}
