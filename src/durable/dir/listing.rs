//! Listing a [`super::DirStore`]: a walk of the tree in key order (a directory `d` sorts as
//! `d/`), whole or one page after a marker, never entering a directory whose keys all lie at or
//! before the marker.

use std::fs;
use std::io::ErrorKind;
use std::path::Path;

use super::{Found, inspect, io_at, path_of};
use crate::durable::{ListPage, StoreError, check_key};

pub(super) fn list_blocking(root: &Path, prefix: &str) -> Result<Vec<String>, StoreError> {
    const OP: &str = "list";
    let mut walk = PageWalk {
        after: None,
        wanted: usize::MAX,
        keys: Vec::new(),
    };
    if inspect(OP, root, prefix)? == Found::Dir {
        walk.visit(OP, &path_of(root, prefix), prefix)?;
    }
    Ok(walk.keys)
}

pub(super) fn list_page_blocking(
    root: &Path,
    prefix: &str,
    after: Option<&str>,
    max_keys: usize,
) -> Result<ListPage, StoreError> {
    const OP: &str = "list_page";
    let mut walk = PageWalk {
        after,
        // One more than the page, to know whether another follows.
        wanted: max_keys + 1,
        keys: Vec::new(),
    };
    if inspect(OP, root, prefix)? == Found::Dir {
        walk.visit(OP, &path_of(root, prefix), prefix)?;
    }
    let mut keys = walk.keys;
    let next = (keys.len() > max_keys).then(|| {
        keys.truncate(max_keys);
        keys[max_keys - 1].clone()
    });
    Ok(ListPage { keys, next })
}

/// A walk of the tree in key order that collects the keys after a marker, and stops when it has
/// enough; it never enters a directory whose keys all lie at or before the marker.
struct PageWalk<'a> {
    /// Only keys greater than this are collected.
    after: Option<&'a str>,
    /// How many keys to collect.
    wanted: usize,
    /// The keys collected, in order.
    keys: Vec<String>,
}

impl PageWalk<'_> {
    /// Visits `dir`, whose key prefix is `key_prefix` (`""` or ending with `/`). Entries are
    /// taken in key order: a directory `d` sorts as `d/`, so `d-x` comes before `d/…`. Names
    /// that are no key segment, symlinks and anything but files and directories are skipped.
    fn visit(&mut self, op: &'static str, dir: &Path, key_prefix: &str) -> Result<(), StoreError> {
        let entries = match fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io_at(op, dir, &e)),
        };
        let mut sorted = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| io_at(op, dir, &e))?;
            let file_name = entry.file_name();
            let (Some(name), Ok(kind)) = (file_name.to_str(), entry.file_type()) else {
                continue;
            };
            let key = format!("{key_prefix}{name}");
            if check_key(name).is_err() || check_key(&key).is_err() {
                continue;
            }
            if kind.is_dir() {
                sorted.push((format!("{key}/"), Some(entry.path())));
            } else if kind.is_file() {
                sorted.push((key, None));
            }
        }
        sorted.sort();
        for (key, subdir) in sorted {
            if self.keys.len() >= self.wanted {
                return Ok(());
            }
            match subdir {
                Some(path) if !self.all_before_marker(&key) => self.visit(op, &path, &key)?,
                Some(_) => {}
                None if self.after.is_none_or(|after| key.as_str() > after) => self.keys.push(key),
                None => {}
            }
        }
        Ok(())
    }

    /// Whether every key under `dir_prefix` (ending with `/`) lies at or before the marker.
    fn all_before_marker(&self, dir_prefix: &str) -> bool {
        self.after
            .is_some_and(|after| after > dir_prefix && !after.starts_with(dir_prefix))
    }
}
