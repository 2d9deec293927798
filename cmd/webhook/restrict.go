package main

import (
	"net/http"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/rest"
)

// restrictToNames returns a copy of cfg whose list and watch requests on the given collection
// paths carry a metadata.name field selector for the given name. A client that may only
// list/watch one object by resourceNames needs exactly that selector to be authorized, and it
// keeps a cache from holding every Secret of the namespace.
func restrictToNames(cfg *rest.Config, names map[string]string) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return &nameSelector{next: rt, names: names}
	})
	return c
}

type nameSelector struct {
	next  http.RoundTripper
	names map[string]string
}

// WrappedRoundTripper lets client-go pass a timed-out request's cancellation to the transport
// beneath (k8s.io/client-go/transport tryCancelRequest) instead of logging that it cannot.
func (s *nameSelector) WrappedRoundTripper() http.RoundTripper { return s.next }

func (s *nameSelector) RoundTrip(r *http.Request) (*http.Response, error) {
	name, ok := s.names[r.URL.Path]
	if !ok || r.Method != http.MethodGet {
		return s.next.RoundTrip(r)
	}
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	q := r.URL.Query()
	if have := q.Get("fieldSelector"); have != "" && have != sel {
		sel = have + "," + sel
	}
	q.Set("fieldSelector", sel)
	r = r.Clone(r.Context())
	r.URL.RawQuery = q.Encode()
	return s.next.RoundTrip(r)
}
