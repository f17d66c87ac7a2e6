//! How a stream over one dataset draws its indices: [`Mode`].
//!
//! The stream, its saved state, its eras and the loaderx sampler shim all name the mode, so
//! it sits here, below all of them and using none of them. It lived in the sampler shim
//! before, which made the stream import the shim that is built on the stream.
//!
//! The numbers are part of the contract: loaderx numbers SEQUENTIAL 0 and IID 1, and a
//! saved [`super::StreamState`] records the mode by its number, so a variant is never
//! renumbered and a new one takes a new number.

/// How indices are drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Mode {
    /// A sliding window over the circular index space.
    Sequential = 0,
    /// Independent uniform draws with replacement.
    Iid = 1,
    /// Shuffled epochs: each epoch visits every index once, in an order fixed by
    /// `(seed, epoch)`.
    Shuffle = 2,
}

impl Mode {
    /// The mode numbered `n` (0 sequential, 1 IID, as loaderx numbers them; 2 shuffle).
    pub fn from_u8(n: u8) -> Option<Mode> {
        match n {
            0 => Some(Mode::Sequential),
            1 => Some(Mode::Iid),
            2 => Some(Mode::Shuffle),
            _ => None,
        }
    }
}
