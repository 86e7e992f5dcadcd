//! `fleet reset-shutdown-attempts CLAIM`: the escape hatch when a fixed shutdown script should be
//! tried now rather than after the reset grace.

use std::io::Write;

use crate::domain::name::ClaimName;
use crate::reconcile::requests;
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
        let now = store.now().await.map_err(|e| Error::Runtime(e.into()))?;
        requests::reset_shutdown_attempts(&store, &c, now)
            .await
            .map_err(request_error)?;
        writeln!(
            out,
            "{}: shutdown attempts reset (was {}); the controller fires the shutdown on its next pass",
            c.name, c.shutdown_attempts
        )?;
        Ok(())
    }
}
