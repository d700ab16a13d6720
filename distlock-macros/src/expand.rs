//! Code generation: check the function, then wrap its body in `Lock::run` (with `keys =
//! [..]`: `Lock::all([..]).run`; with `kind = "semaphore", permits = N`:
//! `Semaphore::new(key, N).run(1, ..)`, taking one permit; the same otherwise).
//!
//! ```text
//! #[distributed_lock(key = "order:<user_id>", wait = "5s")]
//! async fn place_order(user_id: u64) -> Result<Id, AppError> { BODY }
//! ```
//! becomes
//! ```text
//! async fn place_order(user_id: u64) -> Result<Id, AppError> {
//!     ::distlock::__private::inventory::submit! { ::distlock::inspect::Site { function, key, backend, file, line, kind, permits } }
//!     let lock = ::distlock::Lock::new(format!("order:{}", user_id)).wait(Duration::from_millis(5000));
//!     let lock = match ::distlock::__private::wait_override() { Some(w) => lock.wait(w), None => lock };
//!     match lock.run(without_wait_override(typed::<Result<Id, AppError>, _>(async move { BODY }))).await {
//!         Ok(out) => out,
//!         Err(e) => <Result<Id, AppError> as ::distlock::error::LockResult>::from_lock_error(e),
//!     }
//! }
//! ```
//! Under `#[async_trait]` the function this attribute sees returns
//! `Pin<Box<dyn Future<Output = Result<..>> + Send + 'async_trait>>`; then the key is rendered
//! first, the function's block (which builds that boxed future) is evaluated, and the result
//! is a new boxed future running it under `Lock::run`.

use proc_macro2::{Literal, Span, TokenStream};
use quote::{quote, quote_spanned, ToTokens};
use syn::spanned::Spanned;
use syn::visit_mut::VisitMut;
use syn::{
    AttrStyle, FnArg, GenericArgument, Ident, ItemFn, Pat, PathArguments, ReturnType, Type,
    TypeParamBound,
};

use crate::attr::{combine, list, Args, KeyArg, LeaseArg, OnLostArg, Piece};

/// The whole attribute: on any error, the errors followed by the function unchanged (so
/// that its callers do not add errors of their own).
pub(crate) fn distributed_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    let func = match syn::parse2::<ItemFn>(item.clone()) {
        Ok(f) => f,
        Err(e) => {
            let e = syn::Error::new(
                e.span(),
                format!("#[distributed_lock] goes on an `async fn` with a body ({e})"),
            );
            return error_and(e, item);
        }
    };
    // On an error below: the function as written, without warnings about parameters that
    // only the key uses.
    let item = quote!(#[allow(unused_variables)] #func);
    let args = syn::parse2::<Args>(args);
    let shape = shape(&func);
    let (args, shape) = match (args, shape) {
        (Ok(a), Ok(s)) => (a, s),
        (a, s) => {
            let errors = [a.err(), s.err()].into_iter().flatten();
            return match combine(errors) {
                Some(e) => error_and(e, item),
                None => item,
            };
        }
    };
    let keys: Vec<&KeyArg> = match (&args.key, &args.keys) {
        (Some(key), None) => vec![key],
        (None, Some(keys)) => keys.iter().collect(),
        // `Args::parse` fails without a key or with both; keep going without panicking anyway.
        _ => return item,
    };
    if let Some(e) = combine(
        keys.iter()
            .filter_map(|k| check_placeholders(k, &func).err()),
    ) {
        return error_and(e, item);
    }
    generate(&args, &keys, &func, &shape)
}

fn error_and(e: syn::Error, item: TokenStream) -> TokenStream {
    let mut out = e.to_compile_error();
    out.extend(item);
    out
}

/// What the function looks like.
enum FnReturn {
    /// `async fn ... -> Result<T, E>`: the return type.
    Async(Type),
    /// `fn ... -> Pin<Box<dyn Future<Output = Result<T, E>> (+ Send) + 'a>>`, the shape
    /// `#[async_trait]` turns an `async fn` into before this attribute runs.
    Boxed(Type),
}

const NEEDS_RESULT: &str = "returning `Result<T, E>` where `E: From<distlock::LockError>` \
     (an alias such as `anyhow::Result<T>` works too)";

fn shape(func: &ItemFn) -> syn::Result<FnReturn> {
    let sig = &func.sig;
    if sig.asyncness.is_some() {
        return match &sig.output {
            ReturnType::Type(_, ty) if is_result(ty) => Ok(FnReturn::Async((**ty).clone())),
            ReturnType::Type(_, ty) => Err(syn::Error::new_spanned(
                ty,
                format!(
                    "#[distributed_lock] needs a function {NEEDS_RESULT}: a lock that is not \
                     acquired in time (or whose lease is lost) is returned as its error"
                ),
            )),
            ReturnType::Default => {
                // From `fn` to the closing parenthesis of the parameters.
                let mut span = TokenStream::new();
                sig.fn_token.to_tokens(&mut span);
                sig.ident.to_tokens(&mut span);
                span.extend(quote_spanned!(sig.paren_token.span.close()=> ()));
                Err(syn::Error::new_spanned(
                    span,
                    format!(
                        "#[distributed_lock] needs a function {NEEDS_RESULT}; add a return type, \
                         e.g. `-> Result<(), MyError>`"
                    ),
                ))
            }
        };
    }
    if let ReturnType::Type(_, ty) = &sig.output {
        if let Some(output) = boxed_future_output(ty) {
            return if is_result(output) {
                Ok(FnReturn::Boxed(output.clone()))
            } else {
                Err(syn::Error::new_spanned(
                    output,
                    format!("#[distributed_lock] needs a function {NEEDS_RESULT}"),
                ))
            };
        }
    }
    Err(syn::Error::new_spanned(
        sig.fn_token,
        "#[distributed_lock] goes on an `async fn`: add `async` (the lock is held across the \
         body's `.await`s)",
    ))
}

/// A path type whose last segment is `Result<...>`.
fn is_result(ty: &Type) -> bool {
    match ty {
        Type::Path(p) => p.path.segments.last().is_some_and(|s| {
            s.ident == "Result"
                && matches!(&s.arguments, PathArguments::AngleBracketed(a) if !a.args.is_empty())
        }),
        Type::Paren(p) => is_result(&p.elem),
        Type::Group(g) => is_result(&g.elem),
        _ => false,
    }
}

/// `X` of `Pin<Box<dyn Future<Output = X> + ...>>`.
fn boxed_future_output(ty: &Type) -> Option<&Type> {
    let pin_arg = single_generic(ty, "Pin")?;
    let dyn_ty = single_generic(pin_arg, "Box")?;
    let Type::TraitObject(obj) = dyn_ty else {
        return None;
    };
    obj.bounds.iter().find_map(|b| {
        let TypeParamBound::Trait(t) = b else {
            return None;
        };
        let seg = t.path.segments.last()?;
        if seg.ident != "Future" {
            return None;
        }
        let PathArguments::AngleBracketed(a) = &seg.arguments else {
            return None;
        };
        a.args.iter().find_map(|arg| match arg {
            GenericArgument::AssocType(at) if at.ident == "Output" => Some(&at.ty),
            _ => None,
        })
    })
}

/// `T` of `...::Name<T>`.
fn single_generic<'a>(ty: &'a Type, name: &str) -> Option<&'a Type> {
    let Type::Path(p) = ty else { return None };
    let seg = p.path.segments.last()?;
    if seg.ident != name {
        return None;
    }
    let PathArguments::AngleBracketed(a) = &seg.arguments else {
        return None;
    };
    let mut types = a.args.iter().filter_map(|arg| match arg {
        GenericArgument::Type(t) => Some(t),
        _ => None,
    });
    let first = types.next()?;
    types.next().is_none().then_some(first)
}

/// The names the parameters' patterns bind (`self` for a receiver).
fn parameter_names(func: &ItemFn) -> Vec<String> {
    let mut names = Vec::new();
    for input in &func.sig.inputs {
        match input {
            FnArg::Receiver(_) => names.push("self".to_owned()),
            FnArg::Typed(t) => bound_names(&t.pat, &mut names),
        }
    }
    names
}

fn bound_names(pat: &Pat, names: &mut Vec<String>) {
    match pat {
        Pat::Ident(p) => {
            names.push(p.ident.to_string());
            if let Some((_, sub)) = &p.subpat {
                bound_names(sub, names);
            }
        }
        Pat::Tuple(t) => t.elems.iter().for_each(|p| bound_names(p, names)),
        Pat::TupleStruct(t) => t.elems.iter().for_each(|p| bound_names(p, names)),
        Pat::Struct(s) => s.fields.iter().for_each(|f| bound_names(&f.pat, names)),
        Pat::Slice(s) => s.elems.iter().for_each(|p| bound_names(p, names)),
        Pat::Reference(r) => bound_names(&r.pat, names),
        Pat::Paren(p) => bound_names(&p.pat, names),
        Pat::Type(t) => bound_names(&t.pat, names),
        Pat::Or(o) => {
            if let Some(first) = o.cases.first() {
                bound_names(first, names);
            }
        }
        _ => {}
    }
}

/// Every placeholder's root must name a parameter.
fn check_placeholders(key: &KeyArg, func: &ItemFn) -> syn::Result<()> {
    let params = parameter_names(func);
    let errors = key.template.iter().filter_map(|piece| {
        let Piece::Placeholder { root, fields } = piece else {
            return None;
        };
        if params.contains(root) {
            return None;
        }
        let shown = std::iter::once(root.as_str())
            .chain(fields.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(".");
        let fn_name = &func.sig.ident;
        let known = if params.is_empty() {
            format!("`{fn_name}` has no parameters")
        } else {
            format!("the parameters of `{fn_name}` are {}", list(&params))
        };
        Some(syn::Error::new_spanned(
            &key.lit,
            format!("the key's placeholder `<{shown}>` names no parameter `{root}`; {known}"),
        ))
    });
    match combine(errors) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// `impl Trait` → `_`, so that the return type can be written in a turbofish.
struct ImplToInfer;

impl VisitMut for ImplToInfer {
    fn visit_type_mut(&mut self, ty: &mut Type) {
        if let Type::ImplTrait(t) = ty {
            *ty = Type::Infer(syn::TypeInfer {
                underscore_token: syn::Token![_](t.span()),
            });
        } else {
            syn::visit_mut::visit_type_mut(self, ty);
        }
    }
}

/// The expression that renders the key: a `String`.
fn key_expr(key: &KeyArg) -> TokenStream {
    // The key literal's location (errors such as a missing field or a value that is not
    // `Display` are reported on the key) with the call site's hygiene (the names resolve to
    // the parameters; the compiler offers no edits of the literal).
    let span = Span::call_site().located_at(key.lit.span());
    let mut format = String::new();
    let mut values = Vec::new();
    for (i, piece) in key.template.iter().enumerate() {
        match piece {
            Piece::Text(t) => format.push_str(&t.replace('{', "{{").replace('}', "}}")),
            Piece::Placeholder { root, fields } => {
                format.push_str("{}");
                // The value escapes `%` and the first character of the text after it, so
                // two different argument tuples never render the same key.
                let stop = match key.template.get(i + 1) {
                    Some(Piece::Text(t)) => {
                        let c = t.chars().next();
                        quote!(::core::option::Option::Some(#c))
                    }
                    Some(Piece::Placeholder { .. }) => {
                        return syn::Error::new(
                            key.lit.span(),
                            "two placeholders need text between them (e.g. `<a>:<b>`): without it, different values could render the same key",
                        )
                        .to_compile_error();
                    }
                    None => quote!(::core::option::Option::None),
                };
                let root = Ident::new(root, span);
                let fields = fields.iter().map(|f| match f.parse::<usize>() {
                    Ok(i) => {
                        let mut index = Literal::usize_unsuffixed(i);
                        index.set_span(span);
                        index.into_token_stream()
                    }
                    Err(_) => Ident::new(f, span).into_token_stream(),
                });
                values.push(quote_spanned!(span=>
                    ::distlock::__private::KeyPart::new(&(#root #(.#fields)*), #stop)));
            }
        }
    }
    if values.is_empty() {
        let lit = &key.lit;
        quote!(::std::string::String::from(#lit))
    } else {
        let format = syn::LitStr::new(&format, span);
        quote_spanned!(span=> ::std::format!(#format, #(#values),*))
    }
}

fn generate(args: &Args, keys: &[&KeyArg], func: &ItemFn, shape: &FnReturn) -> TokenStream {
    let ItemFn {
        attrs,
        vis,
        sig,
        block,
    } = func;
    let outer_attrs = attrs.iter().filter(|a| a.style == AttrStyle::Outer);
    let inner_attrs = attrs.iter().filter(|a| a.style != AttrStyle::Outer);

    // One `Site` per annotated function, for `init` to check. `file!()`/`line!()` with the
    // call site's span: the attribute.
    let function = sig.ident.to_string();
    // `keys = [..]`: the templates, as written, joined with ", ".
    let key_lit = match keys {
        [key] => key.lit.clone(),
        _ => syn::LitStr::new(
            &keys
                .iter()
                .map(|k| k.lit.value())
                .collect::<Vec<_>>()
                .join(", "),
            Span::call_site(),
        ),
    };
    let backend = match &args.backend {
        Some(b) => quote!(::core::option::Option::Some(#b)),
        None => quote!(::core::option::Option::None),
    };
    let site_kind = match args.kind.as_deref() {
        Some("fair") => quote!(::distlock::LockKind::Fair),
        Some("read") => quote!(::distlock::LockKind::Read),
        Some("write") => quote!(::distlock::LockKind::Write),
        _ => quote!(::distlock::LockKind::Reentrant),
    };
    let site_permits = match (args.kind.as_deref(), args.permits) {
        (Some("semaphore" | "fair_semaphore"), Some(n)) => quote!(::core::option::Option::Some(#n)),
        _ => quote!(::core::option::Option::None),
    };
    let site = quote! {
        ::distlock::__private::inventory::submit! {
            ::distlock::inspect::Site {
                function: ::core::concat!(::core::module_path!(), "::", #function),
                key: #key_lit,
                backend: #backend,
                file: ::core::file!(),
                line: ::core::line!(),
                kind: #site_kind,
                permits: #site_permits,
            }
        }
    };

    let lock = Ident::new("__distlock_lock", Span::mixed_site());
    let out = Ident::new("__distlock_out", Span::mixed_site());
    let body = Ident::new("__distlock_body", Span::mixed_site());
    let wait = Ident::new("__distlock_wait", Span::mixed_site());

    let semaphore = crate::attr::is_semaphore(args.kind.as_deref());
    let constructor = if semaphore {
        // `Args::parse` requires `permits` with a semaphore kind.
        let permits = args.permits.unwrap_or(1);
        let rendered = keys.iter().map(|k| key_expr(k));
        let fair = (args.kind.as_deref() == Some("fair_semaphore")).then(|| quote!(.fair()));
        quote!(::distlock::Semaphore::new(#(#rendered)*, #permits)#fair)
    } else if args.keys.is_some() {
        let rendered = keys.iter().map(|k| key_expr(k));
        quote!(::distlock::Lock::all([#(#rendered),*]))
    } else {
        let rendered = keys.iter().map(|k| key_expr(k));
        quote!(::distlock::Lock::new(#(#rendered)*))
    };
    let mut builder = quote!(#constructor.site(::core::concat!(
        ::core::module_path!(),
        "::",
        #function
    )));
    if let Some(b) = &args.backend {
        builder.extend(quote!(.backend(#b)));
    }
    if let Some(w) = args.wait {
        let ms = millis(w);
        builder.extend(quote!(.wait(::core::time::Duration::from_millis(#ms))));
    }
    match args.kind.as_deref() {
        Some("fair") => builder.extend(quote!(.kind(::distlock::LockKind::Fair))),
        Some("read") => builder.extend(quote!(.kind(::distlock::LockKind::Read))),
        Some("write") => builder.extend(quote!(.kind(::distlock::LockKind::Write))),
        _ => {}
    }
    match args.lease {
        Some(LeaseArg::Auto) => builder.extend(quote!(.lease(::distlock::Lease::Auto))),
        Some(LeaseArg::Fixed(d)) => {
            let ms = millis(d);
            builder.extend(quote!(
                .lease(::distlock::Lease::Fixed(::core::time::Duration::from_millis(#ms)))
            ));
        }
        None => {}
    }
    if let Some(OnLostArg::Signal) = args.on_lost {
        builder.extend(quote!(.on_lost(::distlock::OnLost::Signal)));
    }
    if let Some(h) = args.hold_at_least {
        let ms = millis(h);
        builder.extend(quote!(.hold_at_least(::core::time::Duration::from_millis(#ms))));
    }

    // The conversion of a `LockError` into the function's error type is located at the
    // return type: a missing `From<LockError>` is reported there.
    let ret = match shape {
        FnReturn::Async(ret) | FnReturn::Boxed(ret) => {
            let mut ret = ret.clone();
            ImplToInfer.visit_type_mut(&mut ret);
            ret
        }
    };
    let err = Ident::new("__distlock_err", Span::mixed_site());
    let convert = quote_spanned! {ret.span()=>
        <#ret as ::distlock::error::LockResult>::from_lock_error(#err)
    };

    // `distlock::with_wait(..)` around the call wins over the attribute's wait: read when
    // the call's future runs (under `#[async_trait]` the function is called, building the
    // boxed future, before that future is awaited inside the `with_wait` scope).
    let wait_override = quote! {
        let #lock = match ::distlock::__private::wait_override() {
            ::core::option::Option::Some(#wait) => #lock.wait(#wait),
            ::core::option::Option::None => #lock,
        };
    };

    // A semaphore's section takes one permit.
    let take = if semaphore { quote!(1u32,) } else { quote!() };
    let run = match shape {
        FnReturn::Async(_) => {
            // `typed` makes the body's `return` and `?` see the function's return type.
            quote! {
                #wait_override
                match #lock.run(#take ::distlock::__private::without_wait_override(
                    ::distlock::__private::typed::<#ret, _>(async move #block),
                )).await {
                    ::core::result::Result::Ok(#out) => #out,
                    ::core::result::Result::Err(#err) => #convert,
                }
            }
        }
        FnReturn::Boxed(_) => quote! {
            let #body = #block;
            ::std::boxed::Box::pin(async move {
                #wait_override
                match #lock.run(#take ::distlock::__private::without_wait_override(#body)).await {
                    ::core::result::Result::Ok(#out) => #out,
                    ::core::result::Result::Err(#err) => #convert,
                }
            })
        },
    };

    quote! {
        #(#outer_attrs)*
        #vis #sig {
            #(#inner_attrs)*
            #site
            // Rendered before the body takes the parameters.
            let #lock = #builder;
            #run
        }
    }
}

fn millis(d: std::time::Duration) -> Literal {
    Literal::u64_suffixed(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
