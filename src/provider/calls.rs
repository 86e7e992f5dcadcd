//! Counting cluster-autoscaler's calls (SPEC §4.8): each call's method, status code and time,
//! and a warning for a refused one.

use std::time::Instant;

use tonic::{Response, Status};
use tracing::warn;

use crate::telemetry::{self, CallLabels, Method, Metrics};

impl From<tonic::Code> for telemetry::Code {
    fn from(code: tonic::Code) -> Self {
        use telemetry::Code as L;
        use tonic::Code as C;
        match code {
            C::Ok => L::Ok,
            C::Cancelled => L::Cancelled,
            C::Unknown => L::Unknown,
            C::InvalidArgument => L::InvalidArgument,
            C::DeadlineExceeded => L::DeadlineExceeded,
            C::NotFound => L::NotFound,
            C::AlreadyExists => L::AlreadyExists,
            C::PermissionDenied => L::PermissionDenied,
            C::ResourceExhausted => L::ResourceExhausted,
            C::FailedPrecondition => L::FailedPrecondition,
            C::Aborted => L::Aborted,
            C::OutOfRange => L::OutOfRange,
            C::Unimplemented => L::Unimplemented,
            C::Internal => L::Internal,
            C::Unavailable => L::Unavailable,
            C::DataLoss => L::DataLoss,
            C::Unauthenticated => L::Unauthenticated,
        }
    }
}

/// Counts the call and its time by method and status code, and warns of a refusal (an
/// UNIMPLEMENTED answer is no refusal: it tells cluster-autoscaler to use its own defaults).
pub(super) fn observed<T>(
    metrics: Option<&Metrics>,
    method: Method,
    started: Instant,
    result: Result<Response<T>, Status>,
) -> Result<Response<T>, Status> {
    let code = match &result {
        Ok(_) => tonic::Code::Ok,
        Err(s) => s.code(),
    };
    if let Some(m) = metrics {
        let labels = CallLabels {
            method,
            code: code.into(),
        };
        m.provider_calls.get_or_create(&labels).inc();
        m.provider_call_seconds
            .get_or_create(&labels)
            .observe(started.elapsed().as_secs_f64());
    }
    if let Err(s) = &result
        && s.code() != tonic::Code::Unimplemented
    {
        warn!(?method, code = ?s.code(), message = s.message(), "provider call refused");
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    // Every gRPC code: its label is the name tonic gives it, as /metrics has always shown.
    #[test]
    fn every_grpc_code_is_labelled_by_its_name() {
        for n in 0..=16 {
            let code = tonic::Code::from_i32(n);
            let label: telemetry::Code = code.into();
            assert_eq!(format!("{label:?}"), format!("{code:?}"), "code {n}");
        }
    }
}
