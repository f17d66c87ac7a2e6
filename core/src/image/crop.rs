//! What a loader makes of each image of a field: a pipeline ([`Pipeline`]: a geometry, an
//! output size, a flip probability and an output form) and, per sample, the crop and flip
//! it gets ([`Pipeline::plan`]).
//!
//! Every random choice is drawn from a generator keyed by the loader's seed, the global
//! batch's step, the sample (source and index) and the field ([`Key`]), never by a worker,
//! rank or thread: the same sample of the same global batch gets the same crop and flip
//! on any world size and worker count and after any resume (a global batch is the same
//! samples at any world size, and a resumed loader reads the same steps).
//!
//! The geometries are torchvision's: `RandomResizedCrop` draws an area share and a
//! log-uniform aspect ratio up to ten times and falls back to a centred crop;
//! `CenterCrop` takes a centred square of `ratio` times the shorter side (FFCV's
//! evaluation crop, 224/256: torchvision's `Resize(256)` + `CenterCrop(224)` to within a
//! pixel); `Resize` keeps the whole image. Floating point goes through `libm`, the same
//! software on every platform, so a crop does not change with the machine.

use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use twox_hash::XxHash3_64;

/// Which part of an image becomes the output.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Geometry {
    /// A random crop of `scale` (a share of the area, low to high) and aspect ratio
    /// (width over height, drawn log-uniform in `ratio`), as torchvision's
    /// `RandomResizedCrop` draws it.
    RandomResizedCrop {
        /// Share of the image's area, `(low, high)`, `0 < low <= high <= 1`.
        scale: (f64, f64),
        /// Aspect ratio, `(low, high)`, `0 < low <= high`.
        ratio: (f64, f64),
    },
    /// The centred square of `ratio` times the shorter side (`0 < ratio <= 1`).
    CenterCrop {
        /// Side of the square over the shorter side.
        ratio: f64,
    },
    /// The whole image.
    Resize,
}

/// The element type of an image field's output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dtype {
    /// The pixels as they are, 0-255.
    U8,
    /// `(pixel / 255 - mean) / std`, per channel.
    F32,
}

impl Dtype {
    /// Bytes per value.
    pub fn size(self) -> usize {
        match self {
            Dtype::U8 => 1,
            Dtype::F32 => 4,
        }
    }
}

/// Where each value of an output image lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Height, width, channels (numpy's and PIL's order).
    Hwc,
    /// Channels, height, width (torch's).
    Chw,
}

/// What a loader makes of every image of one field: see the module documentation.
#[derive(Clone, Debug, PartialEq)]
pub struct Pipeline {
    /// Which part of the image.
    pub geometry: Geometry,
    /// Output height and width in pixels.
    pub height: u32,
    /// Output width.
    pub width: u32,
    /// Probability of a horizontal flip, 0 to 1.
    pub flip: f64,
    /// Element type.
    pub dtype: Dtype,
    /// Value order.
    pub layout: Layout,
    /// Per channel (R, G, B) mean and standard deviation on the 0-1 scale, for `F32`.
    pub mean: [f32; 3],
    /// See `mean`.
    pub std: [f32; 3],
    /// Images with more pixels than this are refused before decoding.
    pub max_pixels: u64,
}

impl Pipeline {
    /// Bytes of one output image.
    pub fn sample_bytes(&self) -> usize {
        self.height as usize * self.width as usize * 3 * self.dtype.size()
    }

    /// The output's shape: `[h, w, 3]` or `[3, h, w]`.
    pub fn shape(&self) -> [u64; 3] {
        let (h, w) = (u64::from(self.height), u64::from(self.width));
        match self.layout {
            Layout::Hwc => [h, w, 3],
            Layout::Chw => [3, h, w],
        }
    }

    /// Checks the numbers: a message naming the first that is out of range.
    pub fn check(&self) -> Result<(), alloc::string::String> {
        use alloc::format;
        if self.height == 0 || self.width == 0 || self.height > 1 << 15 || self.width > 1 << 15 {
            return Err(format!("an output size of {} x {} (1 to 32768 each)", self.height, self.width));
        }
        if !(0.0..=1.0).contains(&self.flip) {
            return Err(format!("a flip probability of {} (0 to 1)", self.flip));
        }
        match self.geometry {
            Geometry::RandomResizedCrop { scale: (s0, s1), ratio: (r0, r1) } => {
                if !(s0 > 0.0 && s0 <= s1 && s1 <= 1.0) {
                    return Err(format!("a scale of ({s0}, {s1}) (0 < low <= high <= 1)"));
                }
                if !(r0 > 0.0 && r0 <= r1 && r1.is_finite()) {
                    return Err(format!("a ratio of ({r0}, {r1}) (0 < low <= high)"));
                }
            }
            Geometry::CenterCrop { ratio } if !(ratio > 0.0 && ratio <= 1.0) => {
                return Err(format!("a center crop ratio of {ratio} (0 < ratio <= 1)"));
            }
            _ => {}
        }
        if self.std.iter().any(|&s| !(s.is_finite() && s != 0.0)) || self.mean.iter().any(|m| !m.is_finite()) {
            return Err(format!("a mean of {:?} and std of {:?} (finite, std not 0)", self.mean, self.std));
        }
        Ok(())
    }

    /// The crop and flip of one image of `width` x `height` pixels, keyed by `key`.
    pub fn plan(&self, key: &Key, width: u32, height: u32) -> Crop {
        let mut rng = key.rng();
        let (x, y, w, h) = match self.geometry {
            Geometry::RandomResizedCrop { scale, ratio } => random_resized(&mut rng, width, height, scale, ratio),
            Geometry::CenterCrop { ratio } => {
                let side = libm::round(f64::from(width.min(height)) * ratio).max(1.0) as u32;
                let side = side.min(width).min(height);
                ((width - side) / 2, (height - side) / 2, side, side)
            }
            Geometry::Resize => (0, 0, width, height),
        };
        // Drawn after the crop, always, so the flip's draw does not move with the crop's.
        let flip = unit(rng.next_u64()) < self.flip;
        Crop { x, y, width: w, height: h, flip }
    }
}

/// A rectangle of the source image and whether the output is mirrored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Crop {
    /// Left edge, in pixels.
    pub x: u32,
    /// Top edge.
    pub y: u32,
    /// Width, at least 1.
    pub width: u32,
    /// Height, at least 1.
    pub height: u32,
    /// Mirror left to right.
    pub flip: bool,
}

/// What one sample's randomness is keyed by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Key {
    /// The loader's seed.
    pub seed: u64,
    /// The global batch's step.
    pub step: u64,
    /// The sample's source (0 outside a mixture).
    pub source: u32,
    /// The sample's index in its source.
    pub index: u64,
    /// [`field_key`] of the field's name.
    pub field: u64,
}

impl Key {
    fn rng(&self) -> Xoshiro256PlusPlus {
        let mut bytes = [0u8; 36];
        bytes[..8].copy_from_slice(&self.seed.to_le_bytes());
        bytes[8..16].copy_from_slice(&self.step.to_le_bytes());
        bytes[16..20].copy_from_slice(&self.source.to_le_bytes());
        bytes[20..28].copy_from_slice(&self.index.to_le_bytes());
        bytes[28..36].copy_from_slice(&self.field.to_le_bytes());
        Xoshiro256PlusPlus::seed_from_u64(XxHash3_64::oneshot_with_seed(AUGMENT_KEY, &bytes))
    }
}

/// Keeps augmentation draws apart from every other use of the seed.
const AUGMENT_KEY: u64 = 0x4155_474d_454e_5431; // "AUGMENT1"

/// A field name's part of a [`Key`].
pub fn field_key(name: &str) -> u64 {
    XxHash3_64::oneshot_with_seed(AUGMENT_KEY, name.as_bytes())
}

/// A u64 as a double in `[0, 1)`, from its top 53 bits.
fn unit(x: u64) -> f64 {
    (x >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// Uniform in `[low, high)`.
fn uniform(rng: &mut Xoshiro256PlusPlus, low: f64, high: f64) -> f64 {
    low + (high - low) * unit(rng.next_u64())
}

/// Uniform integer in `0..=n`.
fn up_to(rng: &mut Xoshiro256PlusPlus, n: u32) -> u32 {
    ((u128::from(rng.next_u64()) * (u128::from(n) + 1)) >> 64) as u32
}

/// torchvision's `RandomResizedCrop.get_params`: `(x, y, w, h)`.
fn random_resized(
    rng: &mut Xoshiro256PlusPlus,
    width: u32,
    height: u32,
    scale: (f64, f64),
    ratio: (f64, f64),
) -> (u32, u32, u32, u32) {
    let area = f64::from(width) * f64::from(height);
    let (log0, log1) = (libm::log(ratio.0), libm::log(ratio.1));
    for _ in 0..10 {
        let target = area * uniform(rng, scale.0, scale.1);
        let aspect = libm::exp(uniform(rng, log0, log1));
        let w = libm::round(libm::sqrt(target * aspect));
        let h = libm::round(libm::sqrt(target / aspect));
        if w > 0.0 && h > 0.0 && w <= f64::from(width) && h <= f64::from(height) {
            let (w, h) = (w as u32, h as u32);
            let x = up_to(rng, width - w);
            let y = up_to(rng, height - h);
            return (x, y, w, h);
        }
    }
    // Ten misses: the centred crop of the whole image at the nearest allowed ratio.
    let own = f64::from(width) / f64::from(height);
    let (w, h) = if own < ratio.0 {
        (width, (libm::round(f64::from(width) / ratio.0) as u32).clamp(1, height))
    } else if own > ratio.1 {
        ((libm::round(f64::from(height) * ratio.1) as u32).clamp(1, width), height)
    } else {
        (width, height)
    };
    ((width - w) / 2, (height - h) / 2, w, h)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pipeline(geometry: Geometry) -> Pipeline {
        Pipeline {
            geometry,
            height: 224,
            width: 224,
            flip: 0.5,
            dtype: Dtype::U8,
            layout: Layout::Chw,
            mean: [0.0; 3],
            std: [1.0; 3],
            max_pixels: super::super::DEFAULT_MAX_PIXELS,
        }
    }

    fn key(index: u64) -> Key {
        Key { seed: 7, step: 3, source: 0, index, field: field_key("image") }
    }

    #[test]
    fn random_crops_stay_inside_and_follow_their_key() {
        let p = pipeline(Geometry::RandomResizedCrop { scale: (0.08, 1.0), ratio: (0.75, 4.0 / 3.0) });
        let mut flips = 0;
        let mut areas = 0.0;
        for index in 0..4000u64 {
            let (w, h) = (100 + (index % 400) as u32, 80 + (index % 333) as u32);
            let c = p.plan(&key(index), w, h);
            assert!(c.width >= 1 && c.height >= 1 && c.x + c.width <= w && c.y + c.height <= h, "{c:?} of {w}x{h}");
            assert_eq!(c, p.plan(&key(index), w, h), "the same key, the same crop");
            flips += usize::from(c.flip);
            areas += f64::from(c.width * c.height) / f64::from(w * h);
        }
        assert!((1800..2200).contains(&flips), "{flips} flips of 4000 at 0.5");
        // torchvision's get_params over these sizes (its algorithm run in Python, 40,000
        // draws) gives a mean area share of 0.364: draws that do not fit are retried.
        let mean = areas / 4000.0;
        assert!((0.34..0.39).contains(&mean), "mean area share {mean}");
        let other = |k: Key| p.plan(&k, 500, 375);
        let base = other(key(1));
        assert_ne!(base, other(Key { step: 4, ..key(1) }));
        assert_ne!(base, other(Key { seed: 8, ..key(1) }));
        assert_ne!(base, other(Key { field: field_key("other"), ..key(1) }));
    }

    #[test]
    fn centre_crops_and_resizes_are_fixed() {
        let c = pipeline(Geometry::CenterCrop { ratio: 224.0 / 256.0 }).plan(&key(0), 500, 375);
        assert_eq!((c.x, c.y, c.width, c.height), (86, 23, 328, 328));
        let r = pipeline(Geometry::Resize).plan(&key(0), 500, 375);
        assert_eq!((r.x, r.y, r.width, r.height), (0, 0, 500, 375));
        let thin =
            pipeline(Geometry::RandomResizedCrop { scale: (0.99, 1.0), ratio: (1.0, 1.0) }).plan(&key(0), 1000, 10);
        assert!(thin.width >= 1 && thin.width <= 1000 && thin.height <= 10, "{thin:?}");
        let mut bad = pipeline(Geometry::CenterCrop { ratio: 1.5 });
        assert!(bad.check().is_err());
        bad.geometry = Geometry::RandomResizedCrop { scale: (0.5, 0.2), ratio: (1.0, 1.0) };
        assert!(bad.check().unwrap_err().contains("scale"));
    }
}
