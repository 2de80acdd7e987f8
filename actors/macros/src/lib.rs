//! # leasehold-actors-macros
//!
//! `#[leasehold_actors::main]` and `#[leasehold_actors::test]`: an `async fn` run inside an
//! actix system, for a host that depends on `leasehold-actors` alone.
//!
//! actix's own attributes (`#[actix::main]`, `#[actix_rt::main]`) expand to paths that start
//! with `::actix` or `::actix_rt`, which resolve only in a crate that depends on those crates
//! itself. These expand to actix-rt's attribute reached through `::leasehold_actors`, with its
//! system named by the same path:
//!
//! ```text
//! #[leasehold_actors::main]        ──>  #[::leasehold_actors::__private::main(
//! async fn main() { … }                       system = "::leasehold_actors::System")]
//!                                       async fn main() { … }
//! ```
//!
//! Use them through `leasehold_actors` (which re-exports them), never from this crate directly.
#![warn(missing_docs, unreachable_pub)]

use proc_macro::TokenStream;

/// Runs an `async fn main` inside an actix system (what `Supervisor::start` needs): the
/// attribute of `#[actix::main]`, reachable through `leasehold_actors`. Takes no arguments.
#[proc_macro_attribute]
pub fn main(args: TokenStream, item: TokenStream) -> TokenStream {
    attribute("main", args, item)
}

/// Runs an `async fn` test inside an actix system: `#[actix::test]`, reachable through
/// `leasehold_actors`. Takes no arguments.
#[proc_macro_attribute]
pub fn test(args: TokenStream, item: TokenStream) -> TokenStream {
    attribute("test", args, item)
}

/// `item` under actix-rt's attribute `which`, reached through `::leasehold_actors`.
fn attribute(which: &str, args: TokenStream, item: TokenStream) -> TokenStream {
    let head = if args.is_empty() {
        format!(
            "#[::leasehold_actors::__private::{which}(system = \"::leasehold_actors::System\")]"
        )
    } else {
        format!("::core::compile_error!(\"#[leasehold_actors::{which}] takes no arguments\");")
    };
    match head.parse::<TokenStream>() {
        Ok(mut out) => {
            out.extend(item);
            out
        }
        // The text above is fixed and parses; should it not, the item is left as written.
        Err(_) => item,
    }
}
