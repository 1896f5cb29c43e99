//! Bounded best-k selection with a deterministic order: higher score first, ties broken by the
//! lower row index, so parallel chunks merged in any order give the same answer as one scan.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// One scored row of a matrix or set.
#[derive(Clone, Copy, Debug)]
pub struct Scored {
    pub score: f32,
    pub index: usize,
}

// Ordered so that the *worse* entry is the greater one: a max-heap then keeps the entry to evict
// on top, and `into_sorted_vec` (ascending) lists the best first.
impl Ord for Scored {
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .score
            .partial_cmp(&self.score)
            .unwrap_or(Ordering::Equal)
            .then(self.index.cmp(&other.index))
    }
}

impl PartialOrd for Scored {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Scored {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Scored {}

/// Keeps the `k` best entries whose score is at least `threshold`.
#[derive(Debug)]
pub struct TopK {
    k: usize,
    threshold: f64,
    heap: BinaryHeap<Scored>,
}

impl TopK {
    pub fn new(k: usize, threshold: Option<f64>) -> Self {
        Self {
            k,
            threshold: threshold.unwrap_or(f64::NEG_INFINITY),
            // Capped: `k` may be huge ("all rows") while few rows pass.
            heap: BinaryHeap::with_capacity(k.min(4096)),
        }
    }

    /// Scores strictly below this cannot enter; the hot loop tests it before calling `push`.
    #[inline]
    pub fn floor(&self) -> f32 {
        if self.heap.len() < self.k {
            f32::NEG_INFINITY
        } else {
            self.heap
                .peek()
                .map_or(f32::NEG_INFINITY, |worst| worst.score)
        }
    }

    #[inline]
    pub fn push(&mut self, score: f32, index: usize) {
        if f64::from(score) < self.threshold {
            return;
        }
        let entry = Scored { score, index };
        if self.heap.len() < self.k {
            self.heap.push(entry);
        } else if let Some(mut worst) = self.heap.peek_mut() {
            if entry < *worst {
                *worst = entry;
            }
        }
    }

    pub fn merge(&mut self, other: TopK) {
        for entry in other.heap {
            self.push(entry.score, entry.index);
        }
    }

    /// The kept entries, best first.
    pub fn into_sorted(self) -> Vec<Scored> {
        self.heap.into_sorted_vec()
    }
}

/// The `k`-th largest of the values pushed so far (`-inf` until `k` values were seen).
#[derive(Debug)]
pub struct KthLargest {
    k: usize,
    heap: BinaryHeap<std::cmp::Reverse<TotalF32>>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct TotalF32(f32);

impl Eq for TotalF32 {}

impl Ord for TotalF32 {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

impl PartialOrd for TotalF32 {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl KthLargest {
    pub fn new(k: usize) -> Self {
        Self {
            k,
            heap: BinaryHeap::with_capacity(k.min(4096)),
        }
    }

    #[inline]
    pub fn kth(&self) -> f32 {
        if self.heap.len() < self.k {
            f32::NEG_INFINITY
        } else {
            self.heap
                .peek()
                .map_or(f32::NEG_INFINITY, |smallest| smallest.0 .0)
        }
    }

    #[inline]
    pub fn push(&mut self, value: f32) {
        if self.heap.len() < self.k {
            self.heap.push(std::cmp::Reverse(TotalF32(value)));
        } else if let Some(mut smallest) = self.heap.peek_mut() {
            if value > smallest.0 .0 {
                *smallest = std::cmp::Reverse(TotalF32(value));
            }
        }
    }

    pub fn merge(&mut self, other: KthLargest) {
        for value in other.heap {
            self.push(value.0 .0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_best_with_lower_index_on_ties() {
        let mut top = TopK::new(3, None);
        for (i, s) in [0.5, 0.9, 0.5, 0.9, 0.1, 0.5].iter().enumerate() {
            top.push(*s, i);
        }
        let got: Vec<usize> = top.into_sorted().iter().map(|e| e.index).collect();
        assert_eq!(got, vec![1, 3, 0]);
    }

    #[test]
    fn merge_in_any_order_gives_the_same_answer() {
        let scores = [0.3_f32, 0.7, 0.7, 0.2, 0.9, 0.7, 0.1, 0.3];
        let run = |split: usize, swap: bool| {
            let mut a = TopK::new(4, Some(0.25));
            let mut b = TopK::new(4, Some(0.25));
            for (i, s) in scores.iter().enumerate() {
                if i < split {
                    a.push(*s, i)
                } else {
                    b.push(*s, i)
                }
            }
            if swap {
                b.merge(a);
                b.into_sorted()
            } else {
                a.merge(b);
                a.into_sorted()
            }
        };
        let want: Vec<usize> = run(8, false).iter().map(|e| e.index).collect();
        assert_eq!(want, vec![4, 1, 2, 5]);
        for split in 0..=8 {
            for swap in [false, true] {
                let got: Vec<usize> = run(split, swap).iter().map(|e| e.index).collect();
                assert_eq!(got, want);
            }
        }
    }

    #[test]
    fn threshold_filters_and_floor_tracks_the_worst_kept() {
        let mut top = TopK::new(2, Some(0.5));
        assert_eq!(top.floor(), f32::NEG_INFINITY);
        top.push(0.4, 0);
        top.push(0.6, 1);
        top.push(0.8, 2);
        assert_eq!(top.floor(), 0.6);
        top.push(0.7, 3);
        let got: Vec<(usize, f32)> = top
            .into_sorted()
            .iter()
            .map(|e| (e.index, e.score))
            .collect();
        assert_eq!(got, vec![(2, 0.8), (3, 0.7)]);
    }

    #[test]
    fn kth_largest() {
        let mut kth = KthLargest::new(3);
        for v in [0.1, 0.5, 0.3] {
            kth.push(v);
        }
        assert_eq!(kth.kth(), 0.1);
        kth.push(0.4);
        assert_eq!(kth.kth(), 0.3);
        let mut other = KthLargest::new(3);
        other.push(0.9);
        kth.merge(other);
        assert_eq!(kth.kth(), 0.4);
    }
}
