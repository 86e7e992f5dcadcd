//! `fleet cancel CLAIM`: a pending claim is deleted; a booting or ready one is reversed (cordon,
//! shutdown, completed), never interrupted.

use std::io::Write;

use crate::domain::claim::Reason;
use crate::domain::name::ClaimName;
use crate::reconcile::requests::{self, Cancelled};
use crate::store::catalog::Catalog;
use crate::store::claims::ClaimStore;

use super::claim::request_error;
use super::{Ctx, Error};

#[derive(Debug, clap::Args)]
pub struct Args {
    pub claim: ClaimName,
}

impl Args {
    pub async fn run(self, ctx: &Ctx, out: &mut (dyn Write + Send)) -> Result<(), Error> {
        let mut conn = ctx.endpoint.connect().await?;
        let catalog = Catalog::read(&mut conn, &ctx.keys)
            .await
            .map_err(|e| Error::Runtime(e.into()))?;
        let store = ClaimStore::new(conn, ctx.keys.clone());
        let c = requests::find_claim(&store, &catalog.group_names(), &self.claim)
            .await
            .map_err(request_error)?;
        let ttl = catalog
            .group(&c.group)
            .map_or(std::time::Duration::from_secs(3600), |g| {
                g.timings.ttl_after_finished
            });
        let now = store.now().await.map_err(|e| Error::Runtime(e.into()))?;
        match requests::cancel(&store, &c, Reason::DeletedByHand, now, ttl)
            .await
            .map_err(request_error)?
        {
            Cancelled::Deleted => writeln!(out, "{}: pending claim cancelled (deleted)", c.name)?,
            Cancelled::Marked => writeln!(
                out,
                "{}: {} claim marked for deletion; the controller shuts {} down and completes it",
                c.name, c.phase, c.slot
            )?,
        }
        Ok(())
    }
}
