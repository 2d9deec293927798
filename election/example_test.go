package election_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/noetl/ehdb-election/election"
	"github.com/noetl/ehdb-election/election/fake"
)

// A writer's boot path: the election starts from the environment (or declines, logging why), the
// write path asks for the token on every write, and shutdown hands the Lease over.
func ExampleStartFromEnvironment() {
	ctx := context.Background()
	el := election.StartFromEnvironment(ctx, os.LookupEnv, nil, election.Options{Registerer: prometheus.NewRegistry()})
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = el.Release(ctx)
	}()

	write := func(payload []byte) error {
		tok := el.Token() // lock-free; no API call
		if !tok.Valid {
			return fmt.Errorf("no valid fencing token (last epoch %d)", tok.Epoch)
		}
		_ = payload // ... write, stamped with tok.Epoch, for the fence to compare
		return nil
	}
	_ = write
}

// An election over the in-memory store, as tests run it.
func ExampleStart() {
	store := fake.NewLeaseStore()
	cfg := election.Config{Enabled: true, LeaseDuration: 15 * time.Second, RenewInterval: 5 * time.Second, Shard: 255, HasShard: true}
	ctx, crash := context.WithCancel(context.Background())
	defer crash()
	el, err := election.Start(ctx, store, cfg, election.Options{Registerer: prometheus.NewRegistry(), Identity: election.NewIdentity("writer-255")})
	if err != nil {
		panic(err)
	}
	for !el.Token().Valid {
		time.Sleep(time.Millisecond)
	}
	lease, _ := store.Get(ctx, election.LeaseName(255))
	fmt.Println(lease.Name, el.Token().Epoch, *lease.Spec.LeaseTransitions)
	// Output: ehdb-shard-000000ff 1 1
}
