//! `fleet claim SLOT`: a hand-made claim. The controller boots the slot's machine for it.

use std::io::Write;

use crate::domain::name::BenchName;
use crate::reconcile::requests::{self, RequestError};

use super::{Ctx, Error};

#[derive(Debug, clap::Args)]
pub struct Args {
    pub slot: BenchName,
}

/// Maps a request's failure: a refusal the user can act on is exit 2, the store failing exit 1.
pub fn request_error(e: RequestError) -> Error {
    match e {
        RequestError::Store(_) => Error::Runtime(e.into()),
        RequestError::SlotTaken { .. }
        | RequestError::NoSuchClaim(_)
        | RequestError::Ended { .. }
        | RequestError::Raced(_)
        | RequestError::NotMarkable(..)
        | RequestError::PoweringOff { .. } => Error::Usage(e.into()),
    }
}

impl Args {
    pub async fn run(self, ctx: &Ctx, out: &mut (dyn Write + Send)) -> Result<(), Error> {
        let request = super::views::slot_request(ctx, &self.slot).await?;
        let c = requests::claim_free_slot(&request.store, &request.group, &self.slot)
            .await
            .map_err(request_error)?;
        writeln!(
            out,
            "{}: claim {} created (attempt {}, deadline {}); watch it with `fleet describe {}`",
            self.slot,
            c.name,
            c.attempt,
            super::output::time(c.deadline_at),
            self.slot
        )?;
        if let Some(text) =
            super::views::controller_notice(request.controller.as_ref(), request.now)
        {
            writeln!(out, "note: {text}")?;
        }
        Ok(())
    }
}
