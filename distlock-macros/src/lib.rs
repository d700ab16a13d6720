//! The `#[distributed_lock]` attribute. See the `distlock` crate.
use proc_macro::TokenStream;

/// Placeholder until the attribute lands: passes the item through unchanged.
#[proc_macro_attribute]
pub fn distributed_lock(_args: TokenStream, item: TokenStream) -> TokenStream {
    item
}
