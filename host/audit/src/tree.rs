//! The Merkle tree over the log's records (RFC 6962 hashing, as C2SP `tlog-checkpoint`
//! and Go's `sumdb/tlog` use it), kept alongside the chain. Leaf `i` is the `i`-th line of
//! the log, counted across the day files oldest first, without its newline: exactly what
//! anyone holding the files can recompute.
//!
//! The hashing and the proofs are `tlog_tiles`' (a port of Go's `sumdb/tlog`). What is
//! here only decides which stored hashes to keep: the writer keeps the right edge of the
//! tree (at most 64 hashes), enough for the next leaf and the root; a proof keeps them all.

pub use tlog_tiles::tlog::Hash;
use tlog_tiles::tlog::{
    self, HashReader, stored_hash_index, stored_hashes_for_record_hash, sub_tree_index,
};

/// The RFC 6962 leaf hash of one line of the log (without its newline).
pub fn leaf_hash(line: &[u8]) -> Hash {
    tlog::record_hash(line)
}

/// The tree's right edge: its size and the hashes of the perfect subtrees that make it
/// up, which is all that the next leaf and the root need.
#[derive(Debug, Clone, PartialEq)]
pub struct Tree {
    size: u64,
    /// (stored-hash index, hash) of each perfect subtree, left (largest) to right: exactly
    /// `sub_tree_index(0, size)`.
    edge: Vec<(u64, Hash)>,
}

struct Edge<'a>(&'a [(u64, Hash)]);

impl HashReader for Edge<'_> {
    fn read_hashes(&self, indexes: &[u64]) -> Result<Vec<Hash>, tlog::Error> {
        indexes
            .iter()
            .map(|i| {
                self.0
                    .iter()
                    .find(|(j, _)| j == i)
                    .map(|(_, h)| *h)
                    .ok_or(tlog::Error::IndexesNotInTree)
            })
            .collect()
    }
}

impl Default for Tree {
    fn default() -> Self {
        Tree::new()
    }
}

impl Tree {
    /// The empty tree.
    pub fn new() -> Tree {
        Tree { size: 0, edge: Vec::new() }
    }

    /// The tree of `size` leaves whose right edge is `edge`, as [`Tree::edge`] gave it;
    /// `None` when the count does not fit the size.
    pub fn from_edge(size: u64, edge: Vec<Hash>) -> Option<Tree> {
        let indexes = sub_tree_index(0, size, Vec::new());
        (indexes.len() == edge.len())
            .then(|| Tree { size, edge: indexes.into_iter().zip(edge).collect() })
    }

    /// How many leaves.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The right edge, left to right (what [`Tree::from_edge`] takes back).
    pub fn edge(&self) -> Vec<Hash> {
        self.edge.iter().map(|(_, h)| *h).collect()
    }

    /// Adds a leaf by its hash.
    pub fn push(&mut self, leaf: Hash) {
        self.push_stored(leaf);
    }

    /// Adds a leaf by its hash, and returns the stored hashes it completes (the leaf's
    /// own, then each subtree it closes) with the stored-hash index of the first; the
    /// others follow it in `tlog_tiles`' numbering. A consistency proof is made of such
    /// hashes, so a caller streaming the log keeps only those a proof will read.
    pub(crate) fn push_stored(&mut self, leaf: Hash) -> (u64, Vec<Hash>) {
        let n = self.size;
        // Leaf n completes one subtree per trailing 1 bit of n: those rightmost subtrees
        // merge with it into one, of level m. The edge holds every hash that reads.
        let m = (n + 1).trailing_zeros();
        let Ok(new) = stored_hashes_for_record_hash(n, leaf, &Edge(&self.edge)) else {
            unreachable!("the right edge holds every hash the next leaf needs")
        };
        let top = new.last().copied().unwrap_or(leaf);
        self.edge.truncate(self.edge.len().saturating_sub(m as usize));
        self.edge.push((stored_hash_index(u8::try_from(m).unwrap_or(u8::MAX), n >> m), top));
        self.size = n + 1;
        (stored_hash_index(0, n), new)
    }

    /// The root hash (the empty tree's for no leaves).
    pub fn root(&self) -> Hash {
        tlog::tree_hash(self.size, &Edge(&self.edge)).unwrap_or(tlog::EMPTY_HASH)
    }
}

/// Every stored hash of a tree, in memory (two per leaf, 64 bytes): what an inclusion
/// proof is computed from.
#[derive(Debug, Default)]
pub struct FullTree {
    size: u64,
    hashes: Vec<Hash>,
}

impl HashReader for FullTree {
    fn read_hashes(&self, indexes: &[u64]) -> Result<Vec<Hash>, tlog::Error> {
        indexes
            .iter()
            .map(|i| {
                usize::try_from(*i)
                    .ok()
                    .and_then(|i| self.hashes.get(i).copied())
                    .ok_or(tlog::Error::IndexesNotInTree)
            })
            .collect()
    }
}

impl FullTree {
    /// Adds a leaf by its hash.
    pub fn push(&mut self, leaf: Hash) {
        if let Ok(new) = stored_hashes_for_record_hash(self.size, leaf, &*self) {
            self.hashes.extend(new);
            self.size += 1;
        }
    }

    /// How many leaves.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The root of the first `size` leaves.
    pub fn root_at(&self, size: u64) -> Option<Hash> {
        (size <= self.size).then(|| tlog::tree_hash(size, self).ok()).flatten()
    }

    /// The RFC 6962 inclusion proof of leaf `index` in the tree of the first `size`
    /// leaves: sibling hashes from the leaf up.
    pub fn prove(&self, size: u64, index: u64) -> Option<Vec<Hash>> {
        (size <= self.size).then(|| tlog::prove_record(size, index, self).ok()).flatten()
    }
}

/// Checks that `proof` shows leaf `index`, hashing to `leaf`, in the tree of `size`
/// leaves whose root is `root`.
pub fn check_inclusion(proof: &[Hash], size: u64, root: Hash, index: u64, leaf: Hash) -> bool {
    tlog::check_record(&proof.to_vec(), size, root, index, leaf).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_edge_gives_the_same_roots_as_every_stored_hash() {
        let mut edge = Tree::new();
        let mut full = FullTree::default();
        assert_eq!(edge.root(), tlog::EMPTY_HASH);
        for i in 0u32..300 {
            let leaf = leaf_hash(format!("record {i}").as_bytes());
            edge.push(leaf);
            full.push(leaf);
            assert_eq!(Some(edge.root()), full.root_at(edge.size()), "size {}", edge.size());
            assert!(edge.edge().len() <= 64);
            let back = Tree::from_edge(edge.size(), edge.edge()).unwrap();
            assert_eq!(back, edge);
        }
        assert!(Tree::from_edge(3, vec![]).is_none());
    }

    #[test]
    fn a_proof_checks_and_a_changed_leaf_does_not() {
        let mut full = FullTree::default();
        for i in 0u32..37 {
            full.push(leaf_hash(&i.to_be_bytes()));
        }
        let root = full.root_at(37).unwrap();
        for i in [0u64, 1, 17, 36] {
            let proof = full.prove(37, i).unwrap();
            let leaf = leaf_hash(&(i as u32).to_be_bytes());
            assert!(check_inclusion(&proof, 37, root, i, leaf));
            assert!(!check_inclusion(&proof, 37, root, i, leaf_hash(b"other")));
        }
        assert!(full.prove(37, 37).is_none());
    }

    /// RFC 6962's two-leaf tree, by hand: H(0x01 || H(0x00 || a) || H(0x00 || b)).
    #[test]
    fn hashes_as_rfc_6962_says() {
        use sha2::{Digest as _, Sha256};
        let leaf = |d: &[u8]| -> [u8; 32] {
            Sha256::new().chain_update([0]).chain_update(d).finalize().into()
        };
        let root: [u8; 32] = Sha256::new()
            .chain_update([1])
            .chain_update(leaf(b"a"))
            .chain_update(leaf(b"b"))
            .finalize()
            .into();
        let mut t = Tree::new();
        t.push(leaf_hash(b"a"));
        t.push(leaf_hash(b"b"));
        assert_eq!(t.root().0, root);
    }
}
