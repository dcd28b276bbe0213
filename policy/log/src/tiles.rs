//! The C2SP tlog-tiles layout: hash tiles `tile/<L>/<N>[.p/<W>]` of height 8 (256 hashes at
//! level `8·L`, from `N·256`) and entry bundles `tile/entries/<N>[.p/<W>]` (the entries
//! `N·256 …`, each a big-endian uint16 length and its bytes). `N` is written in groups of
//! three digits, every group but the last prefixed with `x` (`1234067` → `x001/x234/067`);
//! `.p/<W>` marks a partial tile of `W` < 256.

use super::error::LogError;
use super::merkle::HashReader;

/// Hashes (and entries) a full tile holds.
pub const WIDTH: u64 = 256;
/// Tree levels a tile spans.
pub const HEIGHT: u8 = 8;

/// What a tile holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TileKind {
    /// Hashes of tree level `8 · level`.
    Hashes { level: u8 },
    /// The entries themselves.
    Entries,
}

/// One tile's coordinates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TilePath {
    pub kind: TileKind,
    pub index: u64,
    /// 1..=256; 256 is a full tile.
    pub width: u16,
}

impl TilePath {
    /// The tile at `kind`/`index` of a tree of `size` entries, if it exists there (full, or
    /// partial when it is the level's last).
    pub fn in_tree(kind: TileKind, index: u64, size: u64) -> Option<Self> {
        let level = match kind {
            TileKind::Hashes { level } => level,
            TileKind::Entries => 0,
        };
        let count = size
            .checked_shr(u32::from(HEIGHT) * u32::from(level))
            .unwrap_or(0);
        // Checked: an index near 2^56 makes `start + WIDTH` wrap to a small number that
        // every tree "covers" (issue 54, defect 9).
        let start = index.checked_mul(WIDTH)?;
        if start >= count {
            return None;
        }
        let width = (count - start).min(WIDTH);
        Some(Self {
            kind,
            index,
            width: u16::try_from(width).ok()?,
        })
    }

    /// The tile's path, as served under the log's prefix.
    pub fn path(&self) -> String {
        let level = match self.kind {
            TileKind::Hashes { level } => level.to_string(),
            TileKind::Entries => "entries".to_owned(),
        };
        let mut groups = vec![format!("{:03}", self.index % 1000)];
        let mut n = self.index / 1000;
        while n > 0 {
            groups.push(format!("x{:03}", n % 1000));
            n /= 1000;
        }
        groups.reverse();
        let partial = if u64::from(self.width) == WIDTH {
            String::new()
        } else {
            format!(".p/{}", self.width)
        };
        format!("tile/{level}/{}{partial}", groups.join("/"))
    }

    /// Reads a tile path (`tile/…`), strictly: any other spelling of the same tile is refused.
    pub fn parse(path: &str) -> Result<Self, LogError> {
        let bad = |why: &str| LogError::Tile {
            path: path.chars().take(80).collect(),
            why: why.to_owned(),
        };
        if path.len() > 64 {
            return Err(bad("too long"));
        }
        let rest = path
            .strip_prefix("tile/")
            .ok_or_else(|| bad("not under tile/"))?;
        let (level, rest) = rest.split_once('/').ok_or_else(|| bad("no level"))?;
        let kind = if level == "entries" {
            TileKind::Entries
        } else {
            let ok = !level.is_empty()
                && level.bytes().all(|b| b.is_ascii_digit())
                && (level == "0" || !level.starts_with('0'));
            let l: u8 = level
                .parse()
                .ok()
                .filter(|l| ok && *l < 64)
                .ok_or_else(|| bad("bad level"))?;
            TileKind::Hashes { level: l }
        };
        let (digits, width) = match rest.split_once(".p/") {
            Some((d, w)) => {
                let ok =
                    !w.is_empty() && !w.starts_with('0') && w.bytes().all(|b| b.is_ascii_digit());
                let w: u16 = w
                    .parse()
                    .ok()
                    .filter(|w| ok && *w >= 1 && u64::from(*w) < WIDTH)
                    .ok_or_else(|| bad("bad partial width"))?;
                (d, w)
            }
            None => (rest, 256),
        };
        let groups: Vec<&str> = digits.split('/').collect();
        let mut index: u64 = 0;
        for (i, g) in groups.iter().enumerate() {
            let last = i + 1 == groups.len();
            let d = if last {
                *g
            } else {
                g.strip_prefix('x')
                    .ok_or_else(|| bad("a group before the last lacks its x"))?
            };
            if d.len() != 3 || !d.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad("a group is not three digits"));
            }
            let v: u64 = d.parse().map_err(|_| bad("bad digits"))?;
            index = index
                .checked_mul(1000)
                .and_then(|x| x.checked_add(v))
                .ok_or_else(|| bad("index out of range"))?;
        }
        // `x000/001` spells 1 another way.
        if groups.len() > 1 && groups[0] == "x000" {
            return Err(bad("a leading zero group"));
        }
        Ok(Self { kind, index, width })
    }

    /// A hash tile's bytes: its `width` hashes, read from the log's stored hashes.
    pub fn hash_data<R: HashReader>(&self, r: &R) -> Result<Vec<u8>, LogError> {
        let TileKind::Hashes { level } = self.kind else {
            return Err(LogError::Tile {
                path: self.path(),
                why: "an entry bundle has no hashes".into(),
            });
        };
        tlog_tiles::Tile::new(HEIGHT, level, self.index, u32::from(self.width), false)
            .read_data(r)
            .map_err(|e| LogError::Hashes(e.to_string()))
    }
}

/// An entry bundle: each entry as a big-endian uint16 length and its bytes.
pub fn bundle<'a>(entries: impl IntoIterator<Item = &'a [u8]>) -> Result<Vec<u8>, LogError> {
    let mut out = Vec::new();
    for e in entries {
        let len = u16::try_from(e.len()).map_err(|_| LogError::Tile {
            path: "entries".into(),
            why: format!("an entry of {} bytes does not fit a bundle", e.len()),
        })?;
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(e);
    }
    Ok(out)
}

/// The entries of a bundle.
pub fn unbundle(data: &[u8]) -> Result<Vec<&[u8]>, LogError> {
    let mut out = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        let bad = || LogError::Tile {
            path: "entries".into(),
            why: "a truncated entry".into(),
        };
        let (len, tail) = rest.split_first_chunk::<2>().ok_or_else(bad)?;
        let len = usize::from(u16::from_be_bytes(*len));
        if tail.len() < len {
            return Err(bad());
        }
        out.push(&tail[..len]);
        rest = &tail[len..];
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn paths_are_written_and_read_one_way() {
        let t = TilePath {
            kind: TileKind::Hashes { level: 4 },
            index: 1_234_067,
            width: 1,
        };
        assert_eq!(t.path(), "tile/4/x001/x234/067.p/1");
        assert_eq!(TilePath::parse(&t.path()).unwrap(), t);
        let e = TilePath {
            kind: TileKind::Entries,
            index: 5,
            width: 256,
        };
        assert_eq!(e.path(), "tile/entries/005");
        assert_eq!(TilePath::parse("tile/entries/005").unwrap(), e);
        for other in [
            "tile/4/1234067",
            "tile/04/067",
            "tile/4/x000/067",
            "tile/4/067.p/256",
            "tile/4/067.p/0",
            "tile/4/067.p/01",
            "tile/4/67",
            "tile/64/000",
            "tile/4/001/067",
            "tiles/4/067",
            "tile/entries/x1/067",
        ] {
            assert!(TilePath::parse(other).is_err(), "{other}");
        }
    }

    #[test]
    fn a_tree_has_the_tiles_its_size_makes() {
        let hashes = |level| TileKind::Hashes { level };
        assert_eq!(TilePath::in_tree(hashes(0), 0, 300).unwrap().width, 256);
        assert_eq!(TilePath::in_tree(hashes(0), 1, 300).unwrap().width, 44);
        assert!(TilePath::in_tree(hashes(0), 2, 300).is_none());
        assert_eq!(TilePath::in_tree(hashes(1), 0, 300).unwrap().width, 1);
        assert!(TilePath::in_tree(hashes(1), 0, 255).is_none());
        assert!(TilePath::in_tree(hashes(60), 0, u64::MAX).is_none());
        assert!(TilePath::in_tree(TileKind::Entries, u64::MAX, 10).is_none());
        // Issue 54, defect 9: the last index whose start fits in a u64, at every level.
        let last = (1u64 << 56) - 1;
        for level in [0, 1, 30, 56, 63] {
            assert!(
                TilePath::in_tree(hashes(level), last, 10).is_none(),
                "{level}"
            );
            assert!(TilePath::in_tree(hashes(level), last, u64::MAX).is_none() || level == 0);
        }
        assert!(TilePath::in_tree(TileKind::Entries, last, 10).is_none());
        assert!(TilePath::in_tree(TileKind::Entries, last, u64::MAX - 300).is_none());
        // A tree of u64::MAX entries holds that tile, partial (255 of 256).
        assert_eq!(
            TilePath::in_tree(TileKind::Entries, last, u64::MAX).map(|t| t.width),
            Some(255)
        );
    }

    #[test]
    fn bundles_round_trip_and_truncation_is_an_error() {
        let b = bundle([&b"{}"[..], b"", b"abc"]).unwrap();
        assert_eq!(unbundle(&b).unwrap(), vec![&b"{}"[..], b"", b"abc"]);
        assert!(unbundle(&b[..b.len() - 1]).is_err());
        assert!(bundle([&vec![0u8; 70_000][..]]).is_err());
    }
}
