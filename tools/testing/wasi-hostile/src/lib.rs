//! `wasi-hostile`: a standard WASI 0.2 component that misbehaves on request, through
//! standard WASI only (std::fs, wasi:http, stdout, clocks) or in pure computation, so the
//! host's own grants and limits are what stop it.
#![deny(unsafe_code, clippy::unwrap_used, clippy::expect_used)]

#[allow(unsafe_code, reason = "generated bindings and exports")]
mod bindings {
    wit_bindgen::generate!({ world: "hostile", path: "wit" });
    use super::Hostile;
    export!(Hostile with_types_in self);
}

struct Hostile;

/// The outcome of one link attempt, as a line of the report.
fn outcome(what: &str, result: std::io::Result<()>) -> (bool, String) {
    match result {
        Ok(()) => (true, format!("{what}: made")),
        Err(e) => (false, format!("{what}: {e}")),
    }
}

impl bindings::Guest for Hostile {
    fn read_path(path: String) -> Result<String, String> {
        std::fs::read_to_string(path).map_err(|e| e.to_string())
    }

    fn write_path(path: String, content: String) -> Result<(), String> {
        std::fs::write(path, content).map_err(|e| e.to_string())
    }

    fn copy_open_first(source: String, target: String) -> Result<(), String> {
        use std::io::Write as _;
        let mut out = std::fs::File::create(target).map_err(|e| e.to_string())?;
        let data = std::fs::read(source).map_err(|e| e.to_string())?;
        out.write_all(&data).map_err(|e| e.to_string())
    }

    fn list_path(path: String) -> Result<Vec<String>, String> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(path).map_err(|e| e.to_string())? {
            let entry = entry.map_err(|e| e.to_string())?;
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        Ok(names)
    }

    fn rename_path(source: String, target: String) -> Result<(), String> {
        std::fs::rename(source, target).map_err(|e| e.to_string())
    }

    fn remove_path(path: String) -> Result<(), String> {
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() => std::fs::remove_dir(&path),
            _ => std::fs::remove_file(&path),
        }
        .map_err(|e| e.to_string())
    }

    fn make_links(target: String, link: String) -> Result<String, String> {
        let (hard_ok, hard) = outcome("hard link", std::fs::hard_link(&target, &link));
        // std's only stable symlink call on wasip2: `std::os::wasi::fs::symlink_path` is
        // still unstable (wasi_ext), and `soft_link` reaches the same wasi:filesystem call.
        #[expect(deprecated, reason = "the one stable symlink function std has on wasip2")]
        let made = std::fs::soft_link(&target, format!("{link}.sym"));
        let (sym_ok, sym) = outcome("symlink", made);
        let report = format!("{hard}\n{sym}");
        if hard_ok || sym_ok { Ok(report) } else { Err(report) }
    }

    fn fetch_many(url: String, times: u32) -> u32 {
        (0..times).filter(|_| Self::fetch(url.clone()).is_ok()).count() as u32
    }

    fn fetch(url: String) -> Result<String, String> {
        bx_tool_test_wasi_get::get(&url)
    }

    fn fetch_with(url: String, header: String, value: String) -> Result<String, String> {
        bx_tool_test_wasi_get::get_with(&url, &[(header, value)])
    }

    fn env_var(name: String) -> Option<String> {
        std::env::var(name).ok()
    }

    fn spin() -> u32 {
        let mut n: u64 = 0;
        loop {
            n = std::hint::black_box(n.wrapping_add(1));
        }
    }

    fn hog() -> u32 {
        let mut kept: Vec<Vec<u8>> = Vec::new();
        loop {
            kept.push(vec![1u8; 1 << 20]);
            std::hint::black_box(&kept);
        }
    }

    fn flood() -> u32 {
        let mut n: u64 = 0;
        loop {
            println!("flood line {n}");
            n = std::hint::black_box(n.wrapping_add(1));
        }
    }

    fn nap(ms: u64) -> u32 {
        std::thread::sleep(std::time::Duration::from_millis(ms));
        u32::try_from(ms).unwrap_or(u32::MAX)
    }
}
