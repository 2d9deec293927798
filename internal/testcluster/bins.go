package testcluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/noetl/ehdb-election/internal/repo"
)

// binDir finds the control plane binaries: $EHDB_CONTROLPLANE_BIN, else the cache folder that
// `make controlplane` fills (.cache/controlplane/current under the module root).
func binDir() (string, error) {
	if d := os.Getenv("EHDB_CONTROLPLANE_BIN"); d != "" {
		return d, checkBins(d)
	}
	d, err := repo.Path(".cache", "controlplane", "current")
	if err != nil {
		return "", err
	}
	return d, checkBins(d)
}

func checkBins(dir string) error {
	var missing []error
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			missing = append(missing, fmt.Errorf("%s not found in %s", b, dir))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("control plane binaries missing (run `make controlplane`): %w", errors.Join(missing...))
	}
	return nil
}
