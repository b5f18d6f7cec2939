//! Curves thinned for drawing: a plot a few hundred pixels wide shows no more of thousands of
//! steps than of a few hundred, and tessellating every point every frame costs the CPU time
//! that training on the CPU needs. The session keeps every point; only the drawing is thinned.

/// The most points a curve is drawn with.
pub const MAX_POINTS: usize = 1_000;

/// The points to draw a curve `width` pixels wide with: two a pixel, between 200 and
/// [`MAX_POINTS`].
pub fn budget(width: f32) -> usize {
    let width = if width.is_finite() {
        width.max(0.0)
    } else {
        0.0
    };
    ((width as usize) * 2).clamp(200, MAX_POINTS)
}

/// `points` (in x order) thinned to at most `max`: the first and the last, and between them
/// each run of neighbours' lowest and highest point in their order, so that spikes and dips
/// stay. Fewer than `max` are returned as they are.
pub fn thin(points: &[[f64; 2]], max: usize) -> Vec<[f64; 2]> {
    let max = max.max(4);
    if points.len() <= max {
        return points.to_vec();
    }
    let (first, inner, last) = (
        points[0],
        &points[1..points.len() - 1],
        points[points.len() - 1],
    );
    let buckets = (max - 2) / 2;
    let size = inner.len().div_ceil(buckets);
    let mut out = Vec::with_capacity(max);
    out.push(first);
    for bucket in inner.chunks(size) {
        let (mut low, mut high) = (0, 0);
        for (i, p) in bucket.iter().enumerate() {
            if p[1] < bucket[low][1] || bucket[low][1].is_nan() {
                low = i;
            }
            if p[1] > bucket[high][1] || bucket[high][1].is_nan() {
                high = i;
            }
        }
        let (a, b) = (low.min(high), low.max(high));
        out.push(bucket[a]);
        if b != a {
            out.push(bucket[b]);
        }
    }
    out.push(last);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_curves_are_drawn_whole() {
        let points: Vec<[f64; 2]> = (0..50).map(|i| [i as f64, (i * i) as f64]).collect();
        assert_eq!(thin(&points, 100), points);
    }

    #[test]
    fn long_curves_keep_their_ends_and_spikes_within_the_budget() {
        let mut points: Vec<[f64; 2]> = (0..10_000).map(|i| [i as f64, 1.0]).collect();
        points[4_321][1] = 50.0;
        points[7_000][1] = -3.0;
        let thinned = thin(&points, 500);
        assert!(thinned.len() <= 500, "{}", thinned.len());
        // A flat run of neighbours is one point; one with a spike or a dip two.
        assert!(thinned.len() > 200, "{}", thinned.len());
        assert_eq!(thinned.first(), points.first());
        assert_eq!(thinned.last(), points.last());
        assert!(thinned.contains(&[4_321.0, 50.0]));
        assert!(thinned.contains(&[7_000.0, -3.0]));
        // In x order.
        assert!(thinned.windows(2).all(|w| w[0][0] < w[1][0]));
    }

    #[test]
    fn the_budget_follows_the_width() {
        assert_eq!(budget(300.0), 600);
        assert_eq!(budget(10.0), 200);
        assert_eq!(budget(5_000.0), MAX_POINTS);
        assert_eq!(budget(f32::NAN), 200);
    }
}
