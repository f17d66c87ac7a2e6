//! JPEG through libjpeg-turbo's TurboJPEG 3 API (feature `turbojpeg`, the native host's):
//! a whole image, or only the rows and columns a crop needs. Rows below the region are
//! never decoded, rows above it are entropy-decoded and skipped, and columns outside it
//! skip the inverse DCT, upsampling and colour conversion; a `RandomResizedCrop(224)` of a
//! 500 x 375 photograph costs about 0.63x of decoding it whole
//! (docs/decisions/image-decoders.md). The pixels of the region are those of the whole
//! decode: libjpeg-turbo decodes a region exactly, and `Region::around` (render.rs) leaves
//! the resizer the margin its kernel reads.
//!
//! One decompressor per thread, made on first use and kept: making one costs more than
//! decoding a small image. A JPEG in a colour space TurboJPEG does not turn into RGB (CMYK,
//! YCCK) is reported as [`Failed::Unsupported`], and the caller decodes it another way.
//!
//! The crate denies `unsafe`; this file is allowed it because libjpeg-turbo is C: every call
//! into it is one `unsafe` block with the reason it is sound.
#![allow(unsafe_code)]

use alloc::string::String;
use alloc::vec::Vec;
use core::cell::RefCell;
use core::ffi::CStr;

use turbojpeg_sys as tj;

use super::render::{Part, Region};

/// Scans a progressive JPEG may have: a real photograph has about ten; a file of thousands
/// of tiny scans makes a decoder work for minutes (libjpeg-turbo's advice for untrusted input).
const SCAN_LIMIT: i32 = 500;

/// Why a JPEG was not decoded.
#[derive(Debug)]
pub enum Failed {
    /// The data is corrupt or truncated: libjpeg-turbo's message.
    Corrupt(String),
    /// Valid, but in a colour space TurboJPEG does not convert to RGB (CMYK, YCCK).
    Unsupported,
}

/// A TurboJPEG decompressor. Owned by one thread (the handle is not `Send`).
struct Decompressor(tj::tjhandle);

impl Decompressor {
    fn new() -> Result<Decompressor, Failed> {
        // SAFETY: tj3Init takes no pointers; it returns a new handle or null.
        let handle = unsafe { tj::tj3Init(tj::TJINIT_TJINIT_DECOMPRESS as i32) };
        if handle.is_null() {
            return Err(Failed::Corrupt("libjpeg-turbo could not make a decompressor".into()));
        }
        let d = Decompressor(handle);
        // A warning (data ending early, a bad marker) is an error: a loader must not train on
        // the grey rows libjpeg-turbo fills in for a truncated file.
        d.set(tj::TJPARAM_TJPARAM_STOPONWARNING, 1)?;
        d.set(tj::TJPARAM_TJPARAM_SCANLIMIT, SCAN_LIMIT)?;
        Ok(d)
    }

    fn set(&self, param: tj::TJPARAM, value: i32) -> Result<(), Failed> {
        // SAFETY: self.0 is a live handle (made by tj3Init, destroyed only in Drop).
        self.check(unsafe { tj::tj3Set(self.0, param as i32, value) })
    }

    fn get(&self, param: tj::TJPARAM) -> i32 {
        // SAFETY: as in `set`.
        unsafe { tj::tj3Get(self.0, param as i32) }
    }

    fn check(&self, status: i32) -> Result<(), Failed> {
        if status == 0 {
            return Ok(());
        }
        // SAFETY: tj3GetErrorStr returns a NUL-terminated string owned by the handle, valid
        // until the handle's next call; it is copied before anything else is called.
        let said = unsafe { CStr::from_ptr(tj::tj3GetErrorStr(self.0)) };
        let said = said.to_string_lossy();
        // TurboJPEG names the function first ("tj3Decompress8(): ..."): the reader wants the why.
        let why = said.split_once("): ").map_or(&*said, |(_, why)| why);
        Err(Failed::Corrupt(why.replace('\n', " ")))
    }

    /// Decodes `region` of `jpeg` (or more: its left edge moves left to a whole MCU) into
    /// `pixels`, a buffer to reuse (what it holds is overwritten).
    fn decode(&mut self, jpeg: &[u8], region: Option<Region>, mut pixels: Vec<u8>) -> Result<Part, Failed> {
        // SAFETY: the pointer and length describe `jpeg`, which outlives the call; the
        // handle is live.
        self.check(unsafe { tj::tj3DecompressHeader(self.0, jpeg.as_ptr(), jpeg.len() as _) })?;
        let (width, height) = (self.get(tj::TJPARAM_TJPARAM_JPEGWIDTH), self.get(tj::TJPARAM_TJPARAM_JPEGHEIGHT));
        let space = self.get(tj::TJPARAM_TJPARAM_COLORSPACE);
        if space == tj::TJCS_TJCS_CMYK as i32 || space == tj::TJCS_TJCS_YCCK as i32 {
            return Err(Failed::Unsupported);
        }
        if width < 1 || height < 1 {
            return Err(Failed::Corrupt(alloc::format!("a header of {width} x {height} pixels")));
        }
        let (width, height) = (width as u32, height as u32);
        let whole = Region::whole(width, height);
        // The left edge of a cropped decode must fall on an MCU; an unusual sampling
        // (TJSAMP_UNKNOWN, -1) has no MCU width TurboJPEG knows, and is decoded whole.
        let mcu = match self.get(tj::TJPARAM_TJPARAM_SUBSAMP) {
            s if (0..tj::TJ_NUMSAMP as i32).contains(&s) => Some(MCU_WIDTH[s as usize]),
            _ => None,
        };
        let r = match (region, mcu) {
            (Some(r), Some(mcu))
                if r != whole && r.right <= width && r.bottom <= height && r.x < r.right && r.y < r.bottom =>
            {
                Region { x: r.x / mcu * mcu, ..r }
            }
            _ => whole,
        };
        let cropping = if r == whole {
            tj::tjregion { x: 0, y: 0, w: 0, h: 0 }
        } else {
            tj::tjregion { x: r.x as i32, y: r.y as i32, w: (r.right - r.x) as i32, h: (r.bottom - r.y) as i32 }
        };
        // SAFETY: the handle is live and has read this JPEG's header, as cropping requires.
        self.check(unsafe { tj::tj3SetCroppingRegion(self.0, cropping) })?;
        let (w, h) = (r.right - r.x, r.bottom - r.y);
        // Only a longer buffer than last time is zeroed: TurboJPEG writes every byte.
        pixels.resize(w as usize * h as usize * 3, 0);
        // SAFETY: `pixels` holds exactly h rows of w RGB pixels (pitch 0 means w * 3), the
        // size TurboJPEG writes for this cropping region; `jpeg` outlives the call.
        let status = unsafe {
            tj::tj3Decompress8(self.0, jpeg.as_ptr(), jpeg.len() as _, pixels.as_mut_ptr(), 0, tj::TJPF_TJPF_RGB)
        };
        self.check(status)?;
        Ok(Part { x: r.x, y: r.y, width: w, height: h, pixels })
    }
}

impl Drop for Decompressor {
    fn drop(&mut self) {
        // SAFETY: the handle came from tj3Init and is destroyed once, here.
        unsafe { tj::tj3Destroy(self.0) }
    }
}

/// MCU widths by TurboJPEG's subsampling code (TJSAMP_444, 422, 420, GRAY, 440, 411, 441):
/// its `tjMCUWidth`, which the bindings leave out.
const MCU_WIDTH: [u32; 7] = [8, 16, 16, 8, 8, 32, 8];

std::thread_local! {
    static DECOMPRESSOR: RefCell<Option<Decompressor>> = const { RefCell::new(None) };
}

/// Decodes `region` of `jpeg` (the whole image if `None`) on this thread's decompressor,
/// into `buffer` (reused: its old contents are overwritten).
pub(crate) fn decode(jpeg: &[u8], region: Option<Region>, buffer: Vec<u8>) -> Result<Part, Failed> {
    DECOMPRESSOR.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Some(Decompressor::new()?);
        }
        let result = slot.as_mut().expect("made above").decode(jpeg, region, buffer);
        if let Err(Failed::Corrupt(_)) = result {
            // A decompressor that stopped on bad data is not reliably reset by the next
            // header it reads (a valid JPEG then failed with "Bogus Huffman table
            // definition"): the next image gets a new one.
            *slot = None;
        }
        result
    })
}

/// Encodes `rgb` (`width x height`) as a JPEG at `quality` with `subsampling` (a TJSAMP
/// code): for tests, which need JPEGs of every layout without files.
#[cfg(test)]
pub(crate) fn encode_for_tests(rgb: &[u8], width: u32, height: u32, quality: i32, subsampling: i32) -> Vec<u8> {
    assert_eq!(rgb.len(), width as usize * height as usize * 3);
    // SAFETY: a new compressor, used and destroyed in this function; every pointer passed
    // describes a live buffer of the length given; the output buffer is allocated by
    // TurboJPEG and freed with tj3Free after it is copied.
    unsafe {
        let h = tj::tj3Init(tj::TJINIT_TJINIT_COMPRESS as i32);
        assert!(!h.is_null());
        tj::tj3Set(h, tj::TJPARAM_TJPARAM_QUALITY as i32, quality);
        tj::tj3Set(h, tj::TJPARAM_TJPARAM_SUBSAMP as i32, subsampling);
        let (mut out, mut len): (*mut u8, tj::size_t) = (core::ptr::null_mut(), 0);
        let status =
            tj::tj3Compress8(h, rgb.as_ptr(), width as i32, 0, height as i32, tj::TJPF_TJPF_RGB, &mut out, &mut len);
        let said = alloc::ffi::CString::from(CStr::from_ptr(tj::tj3GetErrorStr(h)));
        assert_eq!(status, 0, "{said:?}");
        let bytes = core::slice::from_raw_parts(out, len as usize).to_vec();
        tj::tj3Free(out.cast());
        tj::tj3Destroy(h);
        bytes
    }
}
