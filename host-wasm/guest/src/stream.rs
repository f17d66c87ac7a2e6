//! The `stream` export: the core's [`Stream`] over one dataset, its rank slices and its
//! resume state.
//!
//! Every rule is the core's (`zrecord_core::stream`, docs/stream.md): the order of the
//! samples, the shards of a global batch, the state's JSON and the checks a resume makes,
//! including the one that lets a state saved before an append resume after it. This file
//! only turns WIT values into core ones and core errors into the WIT `error`.

use zrecord_core::stream::{DatasetId, StateError, Stream, StreamError, StreamState};
use zrecord_core::{Error, Mode};

use crate::api::to_wit;
use crate::exports::zrecord::store::stream as wit_stream;
use crate::exports::zrecord::store::types::{Error as WitError, ErrorCode};

use wit_stream::Mode as WitMode;

/// The `stream` resource.
pub struct StreamRes {
    stream: Stream,
}

fn mode(m: WitMode) -> Mode {
    match m {
        WitMode::Sequential => Mode::Sequential,
        WitMode::Iid => Mode::Iid,
        WitMode::Shuffle => Mode::Shuffle,
    }
}

fn id(d: wit_stream::DatasetId) -> DatasetId {
    DatasetId { length: d.length, generation: d.generation }
}

pub fn wit_id(d: DatasetId) -> wit_stream::DatasetId {
    wit_stream::DatasetId { length: d.length, generation: d.generation }
}

fn stream_error(e: StreamError) -> WitError {
    to_wit(Error::InvalidArgument(e.to_string()))
}

fn state_error(e: StateError) -> WitError {
    WitError {
        code: ErrorCode::InvalidArgument,
        message: format!("cannot resume: {e}"),
        path: None,
        record: None,
        field: None,
    }
}

impl wit_stream::GuestStream for StreamRes {
    fn create(
        dataset: wit_stream::DatasetId,
        m: WitMode,
        seed: u64,
        global_batch: u64,
    ) -> Result<wit_stream::Stream, WitError> {
        let stream = Stream::new(id(dataset), mode(m), seed, global_batch).map_err(stream_error)?;
        Ok(wit_stream::Stream::new(StreamRes { stream }))
    }

    fn resumed(
        &self,
        state: String,
        grown_from: Vec<wit_stream::DatasetId>,
    ) -> Result<(wit_stream::Stream, u64), WitError> {
        let state = StreamState::decode(&state).map_err(state_error)?;
        let grown_from: Vec<DatasetId> = grown_from.into_iter().map(id).collect();
        let (stream, step) = self.stream.resumed(&state, &grown_from).map_err(state_error)?;
        Ok((wit_stream::Stream::new(StreamRes { stream }), step))
    }

    fn state(&self, step: u64) -> String {
        self.stream.state(step).encode()
    }

    fn batch(&self, step: u64, rank: u64, world_size: u64) -> Result<Vec<u64>, WitError> {
        let mut shard = self.stream.shard(rank, world_size).map_err(stream_error)?;
        shard.seek(step).map_err(stream_error)?;
        let mut indices = Vec::new();
        // A global batch the host's memory cap refuses is an error, not an abort.
        indices.try_reserve_exact(shard.batch_size()).map_err(|_| to_wit(Error::OutOfMemory))?;
        indices.resize(shard.batch_size(), 0);
        shard.fill(&mut indices);
        Ok(indices)
    }

    fn dataset(&self) -> wit_stream::DatasetId {
        // A stream over one dataset (the WIT makes no mixture) names exactly one.
        wit_id(self.stream.datasets()[0])
    }

    fn mode(&self) -> WitMode {
        match self.stream.mode() {
            Mode::Sequential => WitMode::Sequential,
            Mode::Iid => WitMode::Iid,
            Mode::Shuffle => WitMode::Shuffle,
        }
    }

    fn seed(&self) -> u64 {
        self.stream.seed()
    }

    fn global_batch(&self) -> u64 {
        self.stream.global_batch()
    }

    fn steps_per_epoch(&self) -> Option<u64> {
        self.stream.steps_per_epoch()
    }
}

impl wit_stream::Guest for crate::api::Component {
    type Stream = StreamRes;
}
