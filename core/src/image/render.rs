//! Decoding an image and making a pipeline's output of it (feature `images`): the header
//! checked against `max_pixels` first ([`super::checked_info`]), the pixels decoded to
//! 8-bit RGB (JPEG by zune-jpeg in strict mode, PNG by png, WebP by image-webp: chosen by
//! measurement, docs/decisions/image-decoders.md), the crop resized to the output size by
//! fast_image_resize's bilinear convolution (antialiased when shrinking, as Pillow and
//! torchvision's tensors are), mirrored if the plan says so, and written as the pipeline's
//! dtype and layout straight into the caller's slot of a batch buffer.
//!
//! Grey images are widened to RGB and an alpha channel is dropped, as Pillow's
//! `convert("RGB")` does. A decoder's refusal (truncated, corrupt, unsupported) is an
//! [`ImageError::Decoder`]; nothing here panics on bad input.

use alloc::string::ToString;
use alloc::vec;
use alloc::vec::Vec;

use fast_image_resize::images::{Image, ImageRef};
use fast_image_resize::{FilterType, PixelType, ResizeAlg, ResizeOptions, Resizer};

use super::crop::{Crop, Dtype, Key, Layout, Pipeline};
use super::{checked_info, ImageError, ImageFormat, ImageInfo};

/// Decoded pixels: `width * height * 3` bytes of RGB, row by row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rgb {
    /// Pixels across.
    pub width: u32,
    /// Pixels down.
    pub height: u32,
    /// The values.
    pub pixels: Vec<u8>,
}

/// What a thread keeps between images: the resizer's buffers and the output's.
#[derive(Default)]
pub struct Scratch {
    resizer: Resizer,
    resized: Vec<u8>,
}

impl core::fmt::Debug for Scratch {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Scratch")
    }
}

/// Decodes `bytes` to RGB, refusing an image whose header claims more than `max_pixels`.
pub fn decode(bytes: &[u8], max_pixels: u64) -> Result<Rgb, ImageError> {
    let info = checked_info(bytes, max_pixels)?;
    let failed = |why: alloc::string::String| ImageError::Decoder { format: info.format, why };
    let (width, height, channels, pixels) = match info.format {
        ImageFormat::Jpeg => jpeg(bytes, &info).map_err(failed)?,
        ImageFormat::Png => png(bytes).map_err(failed)?,
        ImageFormat::WebP => webp(bytes).map_err(failed)?,
    };
    if (width, height) != (info.width, info.height) {
        let why = alloc::format!("decodes to {width} x {height}, its header says {} x {}", info.width, info.height);
        return Err(failed(why));
    }
    let pixels = to_rgb(pixels, channels);
    if pixels.len() != width as usize * height as usize * 3 {
        return Err(failed(alloc::format!("gave {} bytes for {width} x {height} pixels", pixels.len())));
    }
    Ok(Rgb { width, height, pixels })
}

/// Decodes `bytes` and writes `pipeline`'s output of it, planned by `key`, into `out`
/// (exactly [`Pipeline::sample_bytes`] long); returns the crop it made.
pub fn render(
    bytes: &[u8],
    pipeline: &Pipeline,
    key: &Key,
    out: &mut [u8],
    scratch: &mut Scratch,
) -> Result<Crop, ImageError> {
    assert_eq!(out.len(), pipeline.sample_bytes(), "the slot of one output image");
    let image = decode(bytes, pipeline.max_pixels)?;
    let crop = pipeline.plan(key, image.width, image.height);
    let (w, h) = (pipeline.width as usize, pipeline.height as usize);
    let resized = &mut scratch.resized;
    resized.clear();
    resized.resize(w * h * 3, 0);
    if (crop.width as usize, crop.height as usize) == (w, h) {
        // No resampling: the crop's rows as they are (a decode at its own size is exact).
        let stride = image.width as usize * 3;
        for (row, dst) in resized.chunks_exact_mut(w * 3).enumerate() {
            let at = (crop.y as usize + row) * stride + crop.x as usize * 3;
            dst.copy_from_slice(&image.pixels[at..at + w * 3]);
        }
    } else {
        let src = ImageRef::new(image.width, image.height, &image.pixels, PixelType::U8x3)
            .expect("decode checked the pixels' length");
        let mut dst = Image::from_slice_u8(pipeline.width, pipeline.height, resized, PixelType::U8x3)
            .expect("a buffer of the output's size");
        let options = ResizeOptions::new().resize_alg(ResizeAlg::Convolution(FilterType::Bilinear)).crop(
            f64::from(crop.x),
            f64::from(crop.y),
            f64::from(crop.width),
            f64::from(crop.height),
        );
        scratch.resizer.resize(&src, &mut dst, &options).expect("a crop inside the image, sizes of at least 1");
    }
    if crop.flip {
        for row in resized.chunks_exact_mut(w * 3) {
            row.reverse(); // pixels reversed, each pixel's channels too...
            for px in row.chunks_exact_mut(3) {
                px.reverse(); // ...and put back in RGB order
            }
        }
    }
    write_out(resized, pipeline, w * h, out);
    Ok(crop)
}

/// Writes `n` RGB pixels as the pipeline's dtype and layout.
fn write_out(rgb: &[u8], p: &Pipeline, n: usize, out: &mut [u8]) {
    match (p.dtype, p.layout) {
        (Dtype::U8, Layout::Hwc) => out.copy_from_slice(rgb),
        (Dtype::U8, Layout::Chw) => {
            let (r, rest) = out.split_at_mut(n);
            let (g, b) = rest.split_at_mut(n);
            for (i, px) in rgb.chunks_exact(3).enumerate() {
                (r[i], g[i], b[i]) = (px[0], px[1], px[2]);
            }
        }
        (Dtype::F32, layout) => {
            // (v / 255 - mean) / std as one multiply and one subtraction per value.
            let scale: [f32; 3] = core::array::from_fn(|c| 1.0 / (255.0 * p.std[c]));
            let shift: [f32; 3] = core::array::from_fn(|c| p.mean[c] / p.std[c]);
            let value = |i: usize, c: usize| f32::from(rgb[i * 3 + c]) * scale[c] - shift[c];
            for (k, slot) in out.chunks_exact_mut(4).enumerate() {
                let (i, c) = match layout {
                    Layout::Hwc => (k / 3, k % 3),
                    Layout::Chw => (k % n, k / n),
                };
                slot.copy_from_slice(&value(i, c).to_le_bytes());
            }
        }
    }
}

/// 8-bit pixels of 1 (grey), 2 (grey, alpha), 3 (RGB) or 4 (RGBA) channels as RGB.
fn to_rgb(pixels: Vec<u8>, channels: usize) -> Vec<u8> {
    match channels {
        3 => pixels,
        1 => pixels.iter().flat_map(|&v| [v, v, v]).collect(),
        2 => pixels.chunks_exact(2).flat_map(|p| [p[0], p[0], p[0]]).collect(),
        _ => pixels.chunks_exact(4).flat_map(|p| [p[0], p[1], p[2]]).collect(),
    }
}

type Decoded = (u32, u32, usize, Vec<u8>);

fn jpeg(bytes: &[u8], info: &ImageInfo) -> Result<Decoded, alloc::string::String> {
    use zune_core::colorspace::ColorSpace;
    use zune_core::options::DecoderOptions;
    let options = DecoderOptions::default()
        .jpeg_set_out_colorspace(ColorSpace::RGB)
        .set_strict_mode(true)
        .set_max_width(info.width as usize)
        .set_max_height(info.height as usize);
    let mut d = zune_jpeg::JpegDecoder::new_with_options(bytes, options);
    // zune-jpeg's messages are quoted, their lines joined by an escaped newline.
    let said = |e: zune_jpeg::errors::DecodeErrors| {
        alloc::format!("{e}").trim_matches('"').replace("\\n", "; ").replace('\n', "; ")
    };
    let pixels = d.decode().map_err(said)?;
    let (w, h) = d.dimensions().ok_or("no dimensions after decoding")?;
    let channels = d.get_output_colorspace().map_or(3, |c| c.num_components());
    Ok((w as u32, h as u32, channels, pixels))
}

fn png(bytes: &[u8]) -> Result<Decoded, alloc::string::String> {
    let mut decoder = ::png::Decoder::new(std::io::Cursor::new(bytes));
    decoder.set_transformations(::png::Transformations::normalize_to_color8());
    let mut reader = decoder.read_info().map_err(|e| e.to_string())?;
    let mut pixels = vec![0; reader.output_buffer_size()];
    let frame = reader.next_frame(&mut pixels).map_err(|e| e.to_string())?;
    pixels.truncate(frame.buffer_size());
    let channels = frame.color_type.samples();
    Ok((frame.width, frame.height, channels, pixels))
}

fn webp(bytes: &[u8]) -> Result<Decoded, alloc::string::String> {
    let mut d = image_webp::WebPDecoder::new(std::io::Cursor::new(bytes)).map_err(|e| e.to_string())?;
    let (w, h) = d.dimensions();
    let size = d.output_buffer_size().ok_or("an image too large to hold")?;
    let mut pixels = vec![0; size];
    d.read_image(&mut pixels).map_err(|e| e.to_string())?;
    Ok((w, h, if d.has_alpha() { 4 } else { 3 }, pixels))
}
