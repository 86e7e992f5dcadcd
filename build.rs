//! Compiles the externalgrpc proto with protox (no system protoc) into the provider's wire types.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/externalgrpc.proto");
    let fds = protox::compile(["proto/externalgrpc.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .generate_default_stubs(true)
        .compile_fds(fds)?;
    Ok(())
}
