//! `sandbox image --from-host`: an image of the host's system directories, built on the
//! engine of the backend that runs commands in images, with no registry.

use crate::args::ImageArgs;
use crate::error::{CliError, SANDBOX_FAILED};

/// Build the image; the exit status of `sandbox`.
pub async fn image(args: ImageArgs) -> i32 {
    // The backend that runs commands in images, from the registry (no name is written
    // here): the first compiled in.
    let Some((info, support)) =
        sandbox::registry::compiled_in().find_map(|i| i.image.as_ref().map(|s| (i, s)))
    else {
        eprintln!(
            "sandbox: no backend of this build runs commands in container images; remedy: \
             rebuild with the cargo feature of one (`sandbox doctor` lists the backends)"
        );
        return SANDBOX_FAILED;
    };
    eprintln!(
        "sandbox: building image {} for the {} backend from this host's system directories \
         (the first build reads them all: minutes for gigabytes)",
        args.tag, info.name
    );
    match (support.build_from_host)(args.tag.clone()).await {
        Ok(made) => {
            let roots: Vec<String> = made.roots.iter().map(|r| r.display().to_string()).collect();
            if made.unchanged {
                eprintln!(
                    "sandbox: image {} is up to date ({})",
                    args.tag,
                    roots.join(", ")
                );
            } else {
                eprintln!(
                    "sandbox: built image {} of {}: {} entries, {} MiB; {} left out (not \
                     readable by others)",
                    args.tag,
                    roots.join(", "),
                    made.entries,
                    made.bytes >> 20,
                    made.left_out
                );
            }
            eprintln!(
                "sandbox: use it with `sandbox run --backend {} --image {} -- PROGRAM`",
                info.name, args.tag
            );
            0
        }
        Err(e) => {
            let (reason, remedy) = CliError::from(e).explain();
            eprintln!("sandbox: {reason}; remedy: {remedy}");
            SANDBOX_FAILED
        }
    }
}
