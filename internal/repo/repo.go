// Package repo locates this repository's own files (the chart, the control plane cache) from
// wherever a test, the demo or a benchmark runs inside the tree.
package repo

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
)

// Root walks up from the working directory to the folder holding this module's go.mod.
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(data, []byte("module github.com/noetl/ehdb-election\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the github.com/noetl/ehdb-election repository (no go.mod above the working directory)")
		}
		dir = parent
	}
}

// Path joins elements onto the repository root.
func Path(elem ...string) (string, error) {
	root, err := Root()
	if err != nil {
		return "", err
	}
	return filepath.Join(append([]string{root}, elem...)...), nil
}
