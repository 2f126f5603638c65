// An implementation of the formats bx's anchored audit log uses that no one on bx wrote:
// Go's golang.org/x/mod/sumdb/note (C2SP signed-note) and sumdb/tlog (RFC 6962 trees).
//
//	go run check.go VKEY CHECKPOINT AUDIT_DIR PROOF
//
// verifies the signed checkpoint with the verifier key, recomputes the tree hash from the
// log's day files (leaf i is the i-th line, without its newline), and checks the
// tlog-proof bundle's inclusion proof of its record. It prints "ok" and exits 0 only when
// every one agrees.
package main

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "check.go: "+format+"\n", args...)
	os.Exit(1)
}

// open verifies a signed checkpoint and returns its size and root.
func open(msg []byte, verifier note.Verifier) (int64, tlog.Hash) {
	n, err := note.Open(msg, note.VerifierList(verifier))
	if err != nil {
		fail("signature: %v", err)
	}
	lines := strings.SplitN(n.Text, "\n", 4)
	if len(lines) < 4 || lines[0] != verifier.Name() {
		fail("checkpoint body %q: not origin, size, root", n.Text)
	}
	size, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil {
		fail("size: %v", err)
	}
	root, err := tlog.ParseHash(lines[2])
	if err != nil {
		fail("root: %v", err)
	}
	return size, root
}

func main() {
	if len(os.Args) != 5 {
		fail("usage: check.go VKEY CHECKPOINT AUDIT_DIR PROOF")
	}
	verifier, err := note.NewVerifier(os.Args[1])
	if err != nil {
		fail("verifier key: %v", err)
	}
	msg, err := os.ReadFile(os.Args[2])
	if err != nil {
		fail("%v", err)
	}
	size, root := open(msg, verifier)

	files, _ := filepath.Glob(filepath.Join(os.Args[3], "*.jsonl"))
	sort.Strings(files)
	var stored []tlog.Hash
	reader := tlog.HashReaderFunc(func(indexes []int64) ([]tlog.Hash, error) {
		out := make([]tlog.Hash, len(indexes))
		for i, x := range indexes {
			out[i] = stored[x]
		}
		return out, nil
	})
	var records [][]byte
	var n int64
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			fail("%v", err)
		}
		for _, line := range bytes.SplitAfter(data, []byte("\n")) {
			if n >= size || !bytes.HasSuffix(line, []byte("\n")) {
				continue
			}
			line = bytes.TrimSuffix(line, []byte("\n"))
			hashes, err := tlog.StoredHashes(n, line, reader)
			if err != nil {
				fail("%v", err)
			}
			stored = append(stored, hashes...)
			records = append(records, line)
			n++
		}
	}
	if n < size {
		fail("the log has %d records, the checkpoint %d", n, size)
	}
	got, err := tlog.TreeHash(size, reader)
	if err != nil {
		fail("%v", err)
	}
	if got != root {
		fail("the tree hash of the log's %d records is %v, the checkpoint says %v", size, got, root)
	}

	proof, err := os.ReadFile(os.Args[4])
	if err != nil {
		fail("%v", err)
	}
	parts := bytes.SplitN(proof, []byte("\n\n"), 2)
	if len(parts) != 2 {
		fail("proof: no checkpoint")
	}
	psize, proot := open(parts[1], verifier)
	lines := strings.Split(string(parts[0]), "\n")
	if lines[0] != "c2sp.org/tlog-proof@v1" || !strings.HasPrefix(lines[1], "extra ") || !strings.HasPrefix(lines[2], "index ") {
		fail("proof: header %q", lines[:3])
	}
	record, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(lines[1], "extra "))
	if err != nil {
		fail("proof extra: %v", err)
	}
	index, err := strconv.ParseInt(strings.TrimPrefix(lines[2], "index "), 10, 64)
	if err != nil {
		fail("proof index: %v", err)
	}
	var path tlog.RecordProof
	for _, l := range lines[3:] {
		h, err := tlog.ParseHash(l)
		if err != nil {
			fail("proof hash: %v", err)
		}
		path = append(path, h)
	}
	if err := tlog.CheckRecord(path, psize, proot, index, tlog.RecordHash(record)); err != nil {
		fail("inclusion proof of record %d: %v", index, err)
	}
	if index >= n || !bytes.Equal(records[index], record) {
		fail("the proof's record is not line %d of the log", index)
	}
	fmt.Printf("ok %d %v\n", size, root)
}
