//! The statistics of the bench report, with nothing of the runner's in them: quantiles, medians,
//! the spread of a set of values, and the percentile bootstrap of statistics of medians (one
//! median, or the ratio of two).
//!
//! Quantiles interpolate linearly between order statistics (Hyndman and Fan's type 7, as R and
//! numpy do by default), so the median of an even count is the mean of the middle two. The
//! confidence interval of a ratio of medians is the percentile bootstrap: [`RESAMPLES`] times,
//! resample each side with replacement to its own size, take the ratio of the resamples'
//! medians; the interval runs from the 2.5th to the 97.5th percentile of those ratios. The
//! generator is SplitMix64, seeded by the caller (see [`fold_seed`]), so an interval is
//! reproducible from its samples.

use serde::{Deserialize, Serialize};

/// Bootstrap resamples per confidence interval.
pub const RESAMPLES: usize = 2000;

/// The `q` quantile (0 to 1) of sorted values, interpolating linearly between order
/// statistics (type 7); `None` if there are none.
pub fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    let last = sorted.len().checked_sub(1)?;
    let h = q.clamp(0.0, 1.0) * last as f64;
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(last);
    Some(sorted[lo] + (h - lo as f64) * (sorted[hi] - sorted[lo]))
}

/// The median of values in any order.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    quantile(&v, 0.5)
}

/// The spread of a set of values.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    /// How many.
    pub samples: usize,
    /// The smallest.
    pub min: f64,
    /// First quartile.
    pub p25: f64,
    /// Median.
    pub median: f64,
    /// Third quartile.
    pub p75: f64,
    /// The largest.
    pub max: f64,
}

impl Spread {
    /// The spread of `values`; `None` if there are none.
    pub fn of(values: &[f64]) -> Option<Self> {
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        Some(Self {
            samples: v.len(),
            min: *v.first()?,
            p25: quantile(&v, 0.25)?,
            median: quantile(&v, 0.5)?,
            p75: quantile(&v, 0.75)?,
            max: *v.last()?,
        })
    }
}

/// SplitMix64 (Steele, Lea and Flood): a tiny, good enough generator for resampling.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number below `bound` (which must not be 0), by multiplying (Lemire): the bias is
    /// below `bound / 2^64`.
    pub fn below(&mut self, bound: usize) -> usize {
        ((u128::from(self.next_u64()) * bound as u128) >> 64) as usize
    }
}

/// A confidence interval.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// Lower bound.
    pub lo: f64,
    /// Upper bound.
    pub hi: f64,
}

/// The 95% percentile-bootstrap interval of a statistic of medians: `resamples` times, resample
/// each side with replacement, to its own size, take each resample's median and `stat` of them
/// (in the sides' order); the interval runs from the 2.5th to the 97.5th percentile of the
/// values `stat` gave. A resample for which `stat` gives `None` is left out. `None` if a side is
/// empty or no resample gave a value.
pub fn bootstrap_medians(
    sides: &[&[f64]],
    resamples: usize,
    seed: u64,
    stat: impl Fn(&[f64]) -> Option<f64>,
) -> Option<Interval> {
    if sides.iter().any(|s| s.is_empty()) {
        return None;
    }
    let mut rng = SplitMix64::new(seed);
    let mut draw = Vec::new();
    let mut medians = vec![0.0; sides.len()];
    let mut values = Vec::with_capacity(resamples);
    for _ in 0..resamples {
        for (m, side) in medians.iter_mut().zip(sides) {
            draw.clear();
            draw.extend((0..side.len()).map(|_| side[rng.below(side.len())]));
            draw.sort_by(f64::total_cmp);
            *m = quantile(&draw, 0.5)?;
        }
        values.extend(stat(&medians));
    }
    values.sort_by(f64::total_cmp);
    Some(Interval {
        lo: quantile(&values, 0.025)?,
        hi: quantile(&values, 0.975)?,
    })
}

/// The 95% percentile-bootstrap interval of `median(a) / median(b)` ([`bootstrap_medians`]).
/// `None` if a side is empty or every resample of `b` has median 0.
pub fn bootstrap_ratio_of_medians(
    a: &[f64],
    b: &[f64],
    resamples: usize,
    seed: u64,
) -> Option<Interval> {
    bootstrap_medians(&[a, b], resamples, seed, |m| {
        (m[1] > 0.0).then(|| m[0] / m[1])
    })
}

/// The 95% percentile-bootstrap interval of the median of `values` ([`bootstrap_medians`]);
/// `None` if there are none.
pub fn bootstrap_median(values: &[f64], resamples: usize, seed: u64) -> Option<Interval> {
    bootstrap_medians(&[values], resamples, seed, |m| Some(m[0]))
}

/// `base` folded with the bytes of `text` (FNV-1a steps): a bootstrap stream per configuration.
pub fn fold_seed(base: u64, text: &str) -> u64 {
    text.bytes().fold(base, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate_between_order_statistics() {
        assert_eq!(quantile(&[], 0.5), None);
        assert_eq!(quantile(&[7.0], 0.25), Some(7.0));
        // Odd count: the middle one; even: the mean of the middle two.
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        // numpy.percentile([1, 2, 3, 4], [25, 75]) == [1.75, 3.25]
        let s = Spread::of(&[4.0, 2.0, 1.0, 3.0]).unwrap();
        assert_eq!((s.p25, s.median, s.p75), (1.75, 2.5, 3.25));
        assert_eq!((s.min, s.max, s.samples), (1.0, 4.0, 4));
        // numpy.percentile(range(1, 12), [25, 75]) == [3.5, 8.5]
        let v: Vec<f64> = (1..=11).map(f64::from).collect();
        let s = Spread::of(&v).unwrap();
        assert_eq!((s.p25, s.median, s.p75), (3.5, 6.0, 8.5));
        assert_eq!(Spread::of(&[]), None);
    }

    #[test]
    fn splitmix64_known_values_and_bounds() {
        // The reference implementation's first outputs for seed 1234567.
        let mut r = SplitMix64::new(1234567);
        assert_eq!(r.next_u64(), 6457827717110365317);
        assert_eq!(r.next_u64(), 3203168211198807973);
        let mut r = SplitMix64::new(1);
        let mut seen = [false; 7];
        for _ in 0..1000 {
            seen[r.below(7)] = true;
        }
        assert!(seen.iter().all(|&s| s));
    }

    #[test]
    fn bootstrap_is_deterministic_and_covers_the_estimate() {
        let a: Vec<f64> = [30, 28, 35, 31, 29, 40, 33, 27, 32, 30, 36, 31]
            .iter()
            .map(|&v| f64::from(v))
            .collect();
        let b: Vec<f64> = [10, 12, 11, 9, 10, 14, 10, 11, 13, 10, 12, 9]
            .iter()
            .map(|&v| f64::from(v))
            .collect();
        let ci = bootstrap_ratio_of_medians(&a, &b, RESAMPLES, 42).unwrap();
        assert_eq!(
            bootstrap_ratio_of_medians(&a, &b, RESAMPLES, 42),
            Some(ci),
            "same seed, same interval"
        );
        assert_ne!(bootstrap_ratio_of_medians(&a, &b, RESAMPLES, 43), Some(ci));
        let point = median(&a).unwrap() / median(&b).unwrap();
        assert!(ci.lo <= point && point <= ci.hi, "{ci:?} vs {point}");
        assert!(ci.lo < ci.hi);
        // Every resampled ratio lies between the extreme ratios.
        assert!(ci.lo >= 27.0 / 14.0 && ci.hi <= 40.0 / 9.0);
        // No spread, no width.
        let one = bootstrap_ratio_of_medians(&[2.0; 5], &[1.0; 3], 100, 1).unwrap();
        assert_eq!((one.lo, one.hi), (2.0, 2.0));
        assert_eq!(bootstrap_ratio_of_medians(&[], &b, 10, 1), None);
        assert_eq!(bootstrap_ratio_of_medians(&a, &[0.0], 10, 1), None);
    }

    #[test]
    fn bootstrap_of_one_median_and_of_a_ratio_share_the_resampling() {
        let v: Vec<f64> = [30, 28, 35, 31, 29, 40, 33, 27, 32, 30, 36, 31]
            .iter()
            .map(|&x| f64::from(x))
            .collect();
        let ci = bootstrap_median(&v, RESAMPLES, 5).unwrap();
        assert_eq!(bootstrap_median(&v, RESAMPLES, 5), Some(ci));
        let m = median(&v).unwrap();
        assert!(ci.lo <= m && m <= ci.hi && ci.lo < ci.hi, "{ci:?}");
        assert!(ci.lo >= 27.0 && ci.hi <= 40.0, "{ci:?}");
        let one = bootstrap_median(&[3.0; 4], 100, 1).unwrap();
        assert_eq!((one.lo, one.hi), (3.0, 3.0));
        assert_eq!(bootstrap_median(&[], 10, 1), None);
        // The ratio's interval is the general one with the ratio as the statistic.
        let b: Vec<f64> = v.iter().map(|x| x / 3.0 + 1.0).collect();
        assert_eq!(
            bootstrap_ratio_of_medians(&v, &b, RESAMPLES, 9),
            bootstrap_medians(&[&v, &b], RESAMPLES, 9, |m| Some(m[0] / m[1]))
        );
        // No statistic from any resample: no interval.
        assert_eq!(bootstrap_medians(&[&v], 10, 1, |_| None), None);
    }
}
