//! The WIT <-> JSON mapping on real components: ones built here from WIT text (see
//! `build.rs`), and bx's own `other-world` test tool for a call end to end.

use serde_json::{Value, json};
use wasmtime::component::{Component, Linker, ResourceTable, Val};
use wasmtime::{Config, Engine, Store};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::*;
use crate::{CallError, Output};

mod build;

fn engine() -> Engine {
    let mut config = Config::new();
    config.wasm_component_model(true);
    Engine::new(&config).unwrap()
}

fn functions(wit: &str) -> Vec<ExportedFn> {
    let engine = engine();
    let component = Component::new(&engine, build::component_bytes(wit)).unwrap();
    exported_functions(&engine, &component).unwrap()
}

fn function<'a>(fns: &'a [ExportedFn], qualified: &str) -> &'a ExportedFn {
    fns.iter().find(|f| f.qualified_name() == qualified).unwrap()
}

fn args_schema_of(f: &ExportedFn) -> &Value {
    &f.schema.as_ref().unwrap().args
}

const FILES: &str = r#"
package bx-test:files@0.1.0;

interface extra {
    record options { max-matches: option<u32>, case-sensitive: bool }
    search: func(query: string, options: options) -> result<list<string>, string>;
}

world files {
    export get-forecast: func(city: string, days: option<u8>) -> string;
    export extra;
}
"#;

#[test]
fn lists_top_level_functions_and_those_of_exported_interfaces() {
    let fns = functions(FILES);
    let listed: Vec<(String, Option<String>, Vec<String>, usize)> = fns
        .iter()
        .map(|f| {
            let params = f.params.iter().map(|(n, _)| n.clone()).collect();
            (f.name.clone(), f.interface.clone(), params, f.results.len())
        })
        .collect();
    let extra = Some("bx-test:files/extra@0.1.0".to_owned());
    assert_eq!(
        listed,
        vec![
            ("get-forecast".into(), None, vec!["city".into(), "days".into()], 1),
            ("search".into(), extra, vec!["query".into(), "options".into()], 1),
        ]
    );
    assert_eq!(fns[1].qualified_name(), "bx-test:files/extra@0.1.0#search");

    let forecast = fns[0].schema.as_ref().unwrap();
    let expected = json!({
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "days": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 255}, {"type": "null"}]},
        },
        "required": ["city"],
        "additionalProperties": false,
    });
    assert_eq!(forecast, &FnSchema { args: expected, result: json!({"type": "string"}) });

    let search = fns[1].schema.as_ref().unwrap();
    let options = json!({
        "type": "object",
        "properties": {
            "max-matches": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 4294967295u32}, {"type": "null"}]},
            "case-sensitive": {"type": "boolean"},
        },
        "required": ["case-sensitive"],
        "additionalProperties": false,
    });
    assert_eq!(search.args["properties"]["options"], options);
    let arm = |key: &str, payload: Value| json!({"type": "object", "properties": {key: payload}, "required": [key], "additionalProperties": false});
    let list = json!({"type": "array", "items": {"type": "string"}});
    let result = json!({"oneOf": [arm("ok", list), arm("err", json!({"type": "string"}))]});
    assert_eq!(search.result, result);
}

#[test]
fn refuses_resources_with_the_reason_and_lists_the_rest() {
    let fns = functions(
        r#"
        package bx-test:handles@0.1.0;
        interface files {
            resource handle {
                read: func() -> string;
            }
            open: func(path: string) -> handle;
            close: func(h: borrow<handle>);
            size: func(path: string) -> u64;
        }
        world handles { export files; }
        "#,
    );
    let reasons: Vec<(String, Option<TypeError>)> =
        fns.iter().map(|f| (f.name.clone(), f.schema.as_ref().err().cloned())).collect();
    let unsupported = |at: &str, what| Some(TypeError::Unsupported { at: at.into(), what });
    assert_eq!(
        reasons,
        vec![
            (
                "[method]handle.read".into(),
                unsupported("parameter `self`", "a borrowed resource handle")
            ),
            ("open".into(), unsupported("the result", "a resource handle (own)")),
            ("close".into(), unsupported("parameter `h`", "a borrowed resource handle")),
            ("size".into(), None),
        ]
    );
    let message = reasons[1].1.as_ref().unwrap().to_string();
    assert_eq!(message, "the result uses a resource handle (own), which has no JSON form");
}

const TYPES: &str = r#"
package bx-test:types@0.1.0;

world types {
    record point { x: s32, y: s32, label: option<string> }
    enum color { red, green }
    flags perms { read, write, exec }
    variant shape { empty, circle(f64), named(string) }

    export t-bool: func(v: bool);
    export t-s8: func(v: s8);
    export t-u8: func(v: u8);
    export t-s16: func(v: s16);
    export t-u16: func(v: u16);
    export t-s32: func(v: s32);
    export t-u32: func(v: u32);
    export t-s64: func(v: s64);
    export t-u64: func(v: u64);
    export t-f32: func(v: f32);
    export t-f64: func(v: f64);
    export t-char: func(v: char);
    export t-string: func(v: string);
    export t-list: func(v: list<u16>);
    export t-tuple: func(v: tuple<u8, string>);
    export t-record: func(v: point);
    export t-enum: func(v: color);
    export t-flags: func(v: perms);
    export t-variant: func(v: shape);
    export t-option: func(v: option<u8>);
    export t-option-option: func(v: option<option<u8>>);
    export t-result: func(v: result<u8, string>);
    export t-result-empty: func(v: result);
    export t-points: func(v: list<point>);
}
"#;

#[test]
fn writes_the_schema_of_every_type() {
    let fns = functions(TYPES);
    let of = |name: &str| args_schema_of(function(&fns, name))["properties"]["v"].clone();
    let int = |min: Value, max: Value| json!({"type": "integer", "minimum": min, "maximum": max});
    let closed = |properties: Value, required: Value| json!({"type": "object", "properties": properties, "required": required, "additionalProperties": false});
    let point = closed(
        json!({
            "x": int(json!(i32::MIN), json!(i32::MAX)),
            "y": int(json!(i32::MIN), json!(i32::MAX)),
            "label": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        }),
        json!(["x", "y"]),
    );
    let u8_schema = int(json!(0), json!(255));
    let f32_max = f64::from(f32::MAX);
    let expected = [
        ("t-bool", json!({"type": "boolean"})),
        ("t-s8", int(json!(-128), json!(127))),
        ("t-u8", u8_schema.clone()),
        ("t-s16", int(json!(-32768), json!(32767))),
        ("t-u16", int(json!(0), json!(65535))),
        ("t-s32", int(json!(i32::MIN), json!(i32::MAX))),
        ("t-u32", int(json!(0), json!(u32::MAX))),
        ("t-s64", int(json!(i64::MIN), json!(i64::MAX))),
        ("t-u64", int(json!(0), json!(u64::MAX))),
        ("t-f32", json!({"type": "number", "minimum": -f32_max, "maximum": f32_max})),
        ("t-f64", json!({"type": "number"})),
        ("t-char", json!({"type": "string", "minLength": 1, "maxLength": 1})),
        ("t-string", json!({"type": "string"})),
        ("t-list", json!({"type": "array", "items": int(json!(0), json!(65535))})),
        (
            "t-tuple",
            json!({"type": "array", "prefixItems": [u8_schema, {"type": "string"}], "minItems": 2, "maxItems": 2}),
        ),
        ("t-record", point.clone()),
        ("t-enum", json!({"type": "string", "enum": ["red", "green"]})),
        (
            "t-flags",
            json!({"type": "array", "items": {"type": "string", "enum": ["read", "write", "exec"]}, "uniqueItems": true}),
        ),
        (
            "t-variant",
            json!({"oneOf": [
                {"const": "empty"},
                closed(json!({"circle": {"type": "number"}}), json!(["circle"])),
                closed(json!({"named": {"type": "string"}}), json!(["named"])),
            ]}),
        ),
        ("t-option", json!({"anyOf": [u8_schema, {"type": "null"}]})),
        (
            "t-option-option",
            json!({"anyOf": [{"anyOf": [u8_schema, {"type": "null"}]}, {"type": "null"}]}),
        ),
        (
            "t-result",
            json!({"oneOf": [
                closed(json!({"ok": u8_schema}), json!(["ok"])),
                closed(json!({"err": {"type": "string"}}), json!(["err"])),
            ]}),
        ),
        (
            "t-result-empty",
            json!({"oneOf": [
                closed(json!({"ok": {"type": "null"}}), json!(["ok"])),
                closed(json!({"err": {"type": "null"}}), json!(["err"])),
            ]}),
        ),
        ("t-points", json!({"type": "array", "items": point})),
    ];
    for (name, schema) in expected {
        assert_eq!(of(name), schema, "{name}");
    }
    assert_eq!(fns.len(), 24, "every function of TYPES is checked above");
}

/// Values per type, some that fit and some that do not, for the agreement test.
fn samples() -> Vec<(&'static str, Vec<Value>)> {
    let big = json!(u64::MAX);
    vec![
        ("t-bool", vec![json!(true), json!(false), json!(0), json!("true"), json!(null)]),
        ("t-s8", vec![json!(-128), json!(127), json!(128), json!(-129), json!(3.0), json!(1.5)]),
        ("t-u8", vec![json!(0), json!(255), json!(256), json!(-1), json!("7"), json!(2e0)]),
        ("t-s16", vec![json!(-32768), json!(32767), json!(32768), json!(-32769)]),
        ("t-u16", vec![json!(65535), json!(65536), json!(-1)]),
        ("t-s32", vec![json!(i32::MIN), json!(i32::MAX), json!(2147483648u32), json!(-2.5)]),
        ("t-u32", vec![json!(u32::MAX), json!(4294967296u64), json!(-1), json!(true)]),
        ("t-s64", vec![json!(i64::MIN), json!(i64::MAX), big.clone(), json!(-9.3e18), json!(1e19)]),
        ("t-u64", vec![big, json!(0), json!(-1), json!(1e19), json!(1e20), json!(0.5)]),
        (
            "t-f32",
            vec![json!(0.1), json!(-3), json!(3.4e38), json!(3.5e38), json!(-1e39), json!("1")],
        ),
        ("t-f64", vec![json!(0.1), json!(1e308), json!(u64::MAX), json!(null), json!([1.0])]),
        ("t-char", vec![json!("a"), json!("é"), json!("🦀"), json!("ab"), json!(""), json!(97)]),
        ("t-string", vec![json!(""), json!("two words"), json!(1), json!(["a"])]),
        ("t-list", vec![json!([]), json!([1, 65535]), json!([1, 65536]), json!([null]), json!({})]),
        ("t-tuple", vec![json!([1, "a"]), json!([1]), json!([1, "a", 2]), json!(["a", 1])]),
        (
            "t-record",
            vec![
                json!({"x": 1, "y": -1}),
                json!({"x": 1, "y": 2, "label": "p"}),
                json!({"x": 1, "y": 2, "label": null}),
                json!({"x": 1}),
                json!({"x": 1, "y": 2, "z": 3}),
                json!([1, 2]),
            ],
        ),
        ("t-enum", vec![json!("red"), json!("green"), json!("blue"), json!("Red"), json!(0)]),
        (
            "t-flags",
            vec![
                json!([]),
                json!(["read", "exec"]),
                json!(["read", "read"]),
                json!(["delete"]),
                json!("read"),
            ],
        ),
        (
            "t-variant",
            vec![
                json!("empty"),
                json!({"circle": 2.5}),
                json!({"named": "n"}),
                json!("circle"),
                json!({"empty": null}),
                json!({"circle": "x"}),
                json!({"circle": 1, "named": "n"}),
                json!({"square": 1}),
            ],
        ),
        ("t-option", vec![json!(null), json!(7), json!(256), json!([7])]),
        ("t-option-option", vec![json!(null), json!(7), json!(-7), json!("7")]),
        (
            "t-result",
            vec![
                json!({"ok": 1}),
                json!({"err": "bad"}),
                json!({"ok": "1"}),
                json!({"ok": 1, "err": "x"}),
                json!({"fine": 1}),
                json!("ok"),
            ],
        ),
        (
            "t-result-empty",
            vec![json!({"ok": null}), json!({"err": null}), json!({"ok": 1}), json!({})],
        ),
        (
            "t-points",
            vec![json!([{"x": 1, "y": 2}]), json!([{"x": 1, "y": 2}, {"x": 1}]), json!([[1, 2]])],
        ),
    ]
}

// The schema and the conversion are one set of rules: a value the schema (checked by a
// JSON Schema validator, not by this module) accepts converts, and one it refuses does
// not; what converts comes back as JSON that converts to the same values.
#[test]
fn the_schema_accepts_exactly_what_converts() {
    let fns = functions(TYPES);
    for (name, values) in samples() {
        let f = function(&fns, name);
        let validator = jsonschema::draft202012::new(args_schema_of(f)).unwrap();
        let (mut accepted, mut refused) = (0, 0);
        for value in values.iter().map(|v| json!({"v": v})).chain([json!({})]) {
            let converted = args_to_vals(&value, &f.params);
            assert_eq!(
                validator.is_valid(&value),
                converted.is_ok(),
                "{name}: {value} {converted:?}"
            );
            match converted {
                Ok(vals) => {
                    accepted += 1;
                    // The text a call's results are written as is their JSON value's,
                    // or the string itself for one that is a string (not an option).
                    let json = vals_to_json(&vals);
                    match (vals.as_slice(), &json) {
                        ([Val::Result(_)], _) => {}
                        ([v], Value::String(s)) if !matches!(v, Val::Option(_)) => {
                            assert_eq!(rendered(&vals), Ok(format!("text: {s}")), "{name}")
                        }
                        _ => assert_eq!(rendered(&vals), Ok(json.to_string()), "{name}"),
                    }
                    let back = json!({"v": vals_to_json(&vals)});
                    assert_eq!(
                        args_to_vals(&back, &f.params).as_ref(),
                        Ok(&vals),
                        "{name}: {back}"
                    );
                }
                Err(_) => refused += 1,
            }
        }
        assert!(accepted >= 1 && refused >= 2, "{name}: samples test both ways");
    }
}

#[test]
fn converts_values_to_the_json_the_table_says() {
    let fns = functions(TYPES);
    let round = |name: &str, value: Value| {
        let vals = args_to_vals(&json!({"v": value}), &function(&fns, name).params).unwrap();
        (vals.clone(), vals_to_json(&vals))
    };
    assert_eq!(round("t-u64", json!(u64::MAX)), (vec![Val::U64(u64::MAX)], json!(u64::MAX)));
    assert_eq!(round("t-s64", json!(i64::MIN)), (vec![Val::S64(i64::MIN)], json!(i64::MIN)));
    assert_eq!(round("t-u8", json!(2.0)), (vec![Val::U8(2)], json!(2)));
    // The shortest decimal that reads back as the same f32.
    assert_eq!(round("t-f32", json!(0.1)), (vec![Val::Float32(0.1)], json!(0.1)));
    assert_eq!(round("t-char", json!("🦀")), (vec![Val::Char('🦀')], json!("🦀")));
    let point = vec![
        ("x".into(), Val::S32(1)),
        ("y".into(), Val::S32(2)),
        ("label".into(), Val::Option(None)),
    ];
    let (vals, json) = round("t-record", json!({"y": 2, "x": 1}));
    assert_eq!(vals, vec![Val::Record(point)]);
    assert_eq!(json, json!({"x": 1, "y": 2, "label": null}));
    assert_eq!(round("t-variant", json!("empty")).0, vec![Val::Variant("empty".into(), None)]);
    let circle = Val::Variant("circle".into(), Some(Box::new(Val::Float64(2.5))));
    assert_eq!(round("t-variant", json!({"circle": 2.5})), (vec![circle], json!({"circle": 2.5})));
    let flags = Val::Flags(vec!["exec".into(), "read".into()]);
    assert_eq!(round("t-flags", json!(["exec", "read"])).0, vec![flags]);
    let err = Val::Result(Err(Some(Box::new(Val::String("bad".into())))));
    assert_eq!(round("t-result", json!({"err": "bad"})), (vec![err], json!({"err": "bad"})));
    // `some(none)` has no JSON of its own: it reads back as none.
    let some_none = Val::Option(Some(Box::new(Val::Option(None))));
    assert_eq!(vals_to_json(&[some_none]), Value::Null);
    assert_eq!(round("t-option-option", json!(null)).0, vec![Val::Option(None)]);
    // Absent option parameters are none.
    assert_eq!(
        args_to_vals(&json!({}), &function(&fns, "t-option").params),
        Ok(vec![Val::Option(None)])
    );
}

#[test]
fn writes_results_and_splits_result_values() {
    assert_eq!(vals_to_json(&[]), Value::Null);
    assert_eq!(vals_to_json(&[Val::Float64(f64::NAN)]), Value::Null);
    assert_eq!(vals_to_json(&[Val::Float32(f32::INFINITY)]), Value::Null);
    let ok = Val::Result(Ok(Some(Box::new(Val::List(vec![Val::String("a".into())])))));
    assert_eq!(split_result(&ok), Some(Ok(json!(["a"]))));
    let err = Val::Result(Err(Some(Box::new(Val::Enum("not-found".into())))));
    assert_eq!(split_result(&err), Some(Err(json!("not-found"))));
    assert_eq!(split_result(&Val::Result(Ok(None))), Some(Ok(Value::Null)));
    assert_eq!(split_result(&Val::String("x".into())), None);
}

/// [`render`]'s output or failure, as text.
fn rendered(results: &[Val]) -> Result<String, String> {
    match render(results.to_vec()) {
        Ok(Output::Json(text)) => Ok(text),
        Ok(Output::Text(text)) => Ok(format!("text: {text}")),
        Err(CallError::Failed(m)) => Err(m),
        Err(other) => Err(format!("{other:?}")),
    }
}

#[test]
fn renders_results_as_text_straight_from_the_values() {
    let ok = |v: Val| Val::Result(Ok(Some(Box::new(v))));
    let err = |v: Val| Val::Result(Err(Some(Box::new(v))));
    // A string is its own text, in the `ok` arm or alone: not escaped at all.
    assert_eq!(rendered(&[ok(Val::String("a\"b\n".into()))]), Ok("text: a\"b\n".to_owned()));
    assert_eq!(rendered(&[Val::String("null".into())]), Ok("text: null".to_owned()));
    assert_eq!(rendered(&[ok(Val::Enum("done".into()))]), Ok("text: done".to_owned()));
    assert_eq!(rendered(&[ok(Val::Char('🦀'))]), Ok("text: 🦀".to_owned()));
    assert_eq!(rendered(&[Val::Variant("empty".into(), None)]), Ok("text: empty".to_owned()));
    // An option of a string is its JSON: its `none` is `null`, which a text would not
    // tell from the string "null".
    let some = |v: Val| Val::Option(Some(Box::new(v)));
    assert_eq!(rendered(&[ok(some(Val::String("null".into())))]), Ok(r#""null""#.to_owned()));
    assert_eq!(rendered(&[ok(Val::Option(None))]), Ok("null".to_owned()));
    assert_eq!(rendered(&[Val::Result(Ok(None))]), Ok("null".to_owned()));
    // Anything else is its JSON, each string in it escaped once.
    let listed = Val::List(vec![Val::String("a\"b".into())]);
    assert_eq!(rendered(&[ok(listed)]), Ok(r#"["a\"b"]"#.to_owned()));
    let case = Val::Variant("found".into(), Some(Box::new(Val::U8(1))));
    assert_eq!(rendered(&[case]), Ok(r#"{"found":1}"#.to_owned()));
    // A record's fields in the order of their names, as a JSON object's keys.
    let record = Val::Record(vec![
        ("y".into(), Val::Float32(0.1)),
        ("x".into(), Val::Float64(f64::NAN)),
        ("w".into(), Val::Char('🦀')),
    ]);
    assert_eq!(rendered(&[ok(record.clone())]), Ok(r#"{"w":"🦀","x":null,"y":0.1}"#.to_owned()));
    assert_eq!(rendered(std::slice::from_ref(&record)), Ok(vals_to_json(&[record]).to_string()));
    // The `err` arm is the failure: a string as itself, anything else as its JSON.
    assert_eq!(
        rendered(&[err(Val::String("no such file".into()))]),
        Err("no such file".to_owned())
    );
    // An enum case, a char, a payload-less variant: strings too, given as themselves.
    assert_eq!(rendered(&[err(Val::Enum("not-found".into()))]), Err("not-found".to_owned()));
    assert_eq!(rendered(&[err(Val::Char('x'))]), Err("x".to_owned()));
    let missing = Val::Option(Some(Box::new(Val::Variant("missing".into(), None))));
    assert_eq!(rendered(&[err(missing)]), Err("missing".to_owned()));
    assert_eq!(rendered(&[err(Val::U8(7))]), Err("7".to_owned()));
    assert_eq!(rendered(&[Val::Result(Err(None))]), Err("null".to_owned()));
    // Not one `result`: the results' JSON.
    assert_eq!(rendered(&[]), Ok("null".to_owned()));
    let two = [Val::U64(u64::MAX), Val::Flags(vec!["exec".into()])];
    assert_eq!(rendered(&two), Ok(format!("[{},[\"exec\"]]", u64::MAX)));
}

#[test]
fn refuses_arguments_with_where_and_what() {
    let fns = functions(FILES);
    let search = &function(&fns, "bx-test:files/extra@0.1.0#search").params;
    let refusal = |args: Value| args_to_vals(&args, search).unwrap_err().to_string();
    let options = |o: Value| json!({"query": "q", "options": o});
    assert_eq!(
        refusal(options(json!({"case-sensitive": true, "max-matches": -1}))),
        "/options/max-matches: expected an integer from 0 to 4294967295, got -1"
    );
    assert_eq!(
        refusal(options(json!({"max-matches": 1}))),
        "/options/case-sensitive: expected true or false, got nothing (it is required)"
    );
    assert_eq!(
        refusal(json!({"query": "q", "options": {"case-sensitive": true}, "qury": 1})),
        "/qury: unknown key, expected one of query, options"
    );
    assert_eq!(
        refusal(json!(["q"])),
        "the arguments: expected an object of arguments, got an array of 1 items"
    );
    assert_eq!(refusal(json!({"query": 7, "options": {}})), "/query: expected a string, got 7");
    // A key is escaped as RFC 6901 says, and cut: the input is never echoed at length.
    let long_key = format!("a/b~{}", "x".repeat(1000));
    let message = refusal(json!({ long_key: 1 }));
    assert!(message.starts_with("/a~1b~0xxx"), "{message}");
    assert!(message.len() < 120, "{message}");
    let long = "y".repeat(1 << 20);
    assert_eq!(
        refusal(json!({"query": ["q"], "options": {}})),
        "/query: expected a string, got an array of 1 items"
    );
    let message = refusal(options(json!({"case-sensitive": long})));
    assert_eq!(
        message,
        format!(
            "/options/case-sensitive: expected true or false, got the string \"{}…\"",
            "y".repeat(40)
        )
    );

    let types = functions(TYPES);
    let refusal = |name: &str, v: Value| {
        args_to_vals(&json!({"v": v}), &function(&types, name).params).unwrap_err().to_string()
    };
    assert_eq!(
        refusal("t-points", json!([{"x": 1, "y": 2}, {"x": 1, "y": 2.5}])),
        "/v/1/y: expected an integer from -2147483648 to 2147483647, got 2.5"
    );
    assert_eq!(
        refusal("t-char", json!("ab")),
        "/v: expected a string of one character, got the string \"ab\""
    );
    assert_eq!(
        refusal("t-enum", json!("blue")),
        "/v: expected one of \"red\", \"green\", got the string \"blue\""
    );
    assert_eq!(
        refusal("t-variant", json!({"square": 1})),
        "/v: expected one of \"empty\", {\"circle\": …}, {\"named\": …}, got an object with 1 keys"
    );
    assert_eq!(
        refusal("t-flags", json!(["read", "read"])),
        "/v/1: expected a flag not given before, one of \"read\", \"write\", \"exec\", got the string \"read\""
    );
    assert_eq!(
        refusal("t-tuple", json!([1])),
        "/v: expected an array of 2 items, got an array of 1 items"
    );
    assert_eq!(
        refusal("t-result", json!({"ok": "1"})),
        "/v/ok: expected an integer from 0 to 255, got the string \"1\""
    );
    assert_eq!(refusal("t-option", json!(256)), "/v: expected an integer from 0 to 255, got 256");
}

/// WIT for one function whose parameter is `list` nested `lists` times around `u8`.
fn nested_lists(lists: usize) -> String {
    let ty = format!("{}u8{}", "list<".repeat(lists), ">".repeat(lists));
    format!("package bx-test:deep@0.1.0;\nworld deep {{ export f: func(v: {ty}); }}")
}

#[test]
fn refuses_types_deeper_than_the_cap() {
    let fits = functions(&nested_lists(MAX_DEPTH - 1));
    assert!(fits[0].schema.is_ok());
    let deep = functions(&nested_lists(MAX_DEPTH));
    let too_deep = TypeError::TooDeep { at: "parameter `v`".into(), limit: MAX_DEPTH };
    assert_eq!(deep[0].schema.as_ref().err(), Some(&too_deep));
    // The conversion stops at the same depth, in case it is handed such a function.
    let mut value = json!(1);
    for _ in 0..MAX_DEPTH {
        value = json!([value]);
    }
    let refused = args_to_vals(&json!({"v": value}), &deep[0].params).unwrap_err();
    assert!(matches!(refused, ArgError::TooDeep { .. }), "{refused}");
}

#[test]
fn refuses_schemas_larger_than_the_cap() {
    // 200 fields of 60-byte names, used by five parameters: about 80 KiB.
    let fields: Vec<String> = (0..200).map(|i| format!("f{i:0>59}: u8")).collect();
    let wit = format!(
        "package bx-test:big@0.1.0;\nworld big {{ record r {{ {} }}\n export f: func(a: r, b: r, c: r, d: r, e: r); export g: func(a: r); }}",
        fields.join(", ")
    );
    let fns = functions(&wit);
    let too_large = TypeError::TooLarge { of: "the arguments", limit: MAX_SCHEMA_BYTES };
    assert_eq!(fns[0].schema.as_ref().err(), Some(&too_large));
    assert!(fns[1].schema.is_ok());

    // Types that double at every level stop at the cap, early: 2^16 leaves written out,
    // within what wasmparser lets a component's types add up to (a million).
    let mut wit = String::from("package bx-test:wide@0.1.0;\nworld wide {\n record r0 { a: u8 }\n");
    for i in 1..=16 {
        wit.push_str(&format!(" record r{i} {{ a: r{}, b: r{} }}\n", i - 1, i - 1));
    }
    wit.push_str(" export f: func(v: r16);\n}");
    let fns = functions(&wit);
    assert_eq!(fns[0].schema.as_ref().err(), Some(&too_large));
}

#[test]
fn refuses_components_with_more_functions_than_the_cap() {
    let exports: String =
        (0..=MAX_FUNCTIONS).map(|i| format!(" export fun{i}: func();\n")).collect();
    let wit = format!("package bx-test:many@0.1.0;\nworld many {{\n{exports}}}");
    let engine = engine();
    let component = Component::new(&engine, build::component_bytes(&wit)).unwrap();
    assert_eq!(
        exported_functions(&engine, &component).unwrap_err(),
        TypeError::TooManyFunctions { count: MAX_FUNCTIONS + 1, limit: MAX_FUNCTIONS }
    );
}

struct Wasi {
    ctx: WasiCtx,
    table: ResourceTable,
}

impl WasiView for Wasi {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.ctx, table: &mut self.table }
    }
}

fn store(engine: &Engine) -> Store<Wasi> {
    Store::new(engine, Wasi { ctx: WasiCtx::builder().build(), table: ResourceTable::new() })
}

// A standard component's function called end to end: listed, found in an instance, called
// with values from JSON, its result back as JSON.
#[tokio::test]
async fn calls_a_real_components_function_from_json() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tools/target/wasm32-wasip2/release/bx_tool_test_other_world.wasm"
    );
    let engine = engine();
    let component = Component::from_file(&engine, path).unwrap();
    let fns = exported_functions(&engine, &component).unwrap();
    let greet = function(&fns, "greet");
    assert_eq!(
        greet.schema.as_ref().unwrap().args,
        json!({
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "required": ["name"],
            "additionalProperties": false,
        })
    );

    let mut linker = Linker::new(&engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker).unwrap();
    let mut store = store(&engine);
    let instance = linker.instantiate_async(&mut store, &component).await.unwrap();
    let func = lookup(&instance, &mut store, greet).unwrap();
    let params = args_to_vals(&json!({"name": "bx"}), &greet.params).unwrap();
    let mut results = vec![Val::Bool(false); greet.results.len()];
    func.call_async(&mut store, &params, &mut results).await.unwrap();
    assert_eq!(vals_to_json(&results), json!("hello bx"));
    // No docs: the build drops them (see docs.rs).
    assert_eq!(function_docs(&std::fs::read(path).unwrap()), Default::default());
}

#[tokio::test]
async fn looks_functions_up_in_interfaces_and_not_elsewhere() {
    let engine = engine();
    let component = Component::new(&engine, build::component_bytes(FILES)).unwrap();
    let fns = exported_functions(&engine, &component).unwrap();
    let linker: Linker<Wasi> = Linker::new(&engine);
    let mut store = store(&engine);
    let instance = linker.instantiate_async(&mut store, &component).await.unwrap();
    for f in &fns {
        assert!(lookup(&instance, &mut store, f).is_some(), "{}", f.qualified_name());
    }
    let mut elsewhere = fns[1].clone();
    elsewhere.interface = Some("bx-test:files/other@0.1.0".into());
    assert!(lookup(&instance, &mut store, &elsewhere).is_none());
    let mut top = fns[1].clone();
    top.interface = None;
    assert!(lookup(&instance, &mut store, &top).is_none());
}

/// `wasm` with a `package-docs` section for `wit`, as a producer that keeps docs writes it.
fn with_docs(wasm: Vec<u8>, wit: &str) -> Vec<u8> {
    let (resolve, world) = build::resolve(wit);
    let package = resolve.worlds[world].package.unwrap();
    let data = wit_parser::PackageMetadata::extract(&resolve, package).encode().unwrap();
    let section = wasm_encoder::CustomSection { name: "package-docs".into(), data: data.into() };
    let mut wasm = wasm;
    wasm_encoder::ComponentSection::append_to_component(&section, &mut wasm);
    wasm
}

#[test]
fn reads_function_docs_from_the_package_docs_section() {
    // A decoded component is the world `root` of the package `root:component`; its docs
    // are written for that.
    let long = "z".repeat(5000);
    let wit = format!(
        r#"
        package root:component;
        world root {{
            /// Says hello
            /// to `name`.
            export greet: func(name: string) -> string;
            /// {long}
            export long: func();
            export bare: func();
            export extra: interface {{
                /// Searches.
                search: func(query: string);
            }}
        }}
        "#
    );
    let wasm = build::component_bytes(&wit);
    assert_eq!(function_docs(&wasm), Default::default());
    let docs = function_docs(&with_docs(wasm, &wit));
    let cut = format!("{}…", "z".repeat(4096 - '…'.len_utf8()));
    let expected = [
        ("extra#search".to_owned(), "Searches.".to_owned()),
        ("greet".to_owned(), "Says hello\nto `name`.".to_owned()),
        ("long".to_owned(), cut),
    ];
    assert_eq!(docs, expected.into_iter().collect());
    assert_eq!(function_docs(b"\0asm garbage"), Default::default());
}
