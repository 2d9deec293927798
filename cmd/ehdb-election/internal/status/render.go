package status

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/util/duration"
)

// Report is one view of a namespace's shard Leases.
type Report struct {
	Namespace  string
	ObservedAt time.Time // the instant the rows were computed at
	Rows       []Row
	Ignored    []Ignored
	// Scraped says the rows carry the holder pods' scrape (the table grows its columns).
	Scraped bool
}

// WriteTable writes the human view: one line per shard Lease, kubectl-style columns.
func WriteTable(w io.Writer, r Report) error {
	tw := tabwriter.NewWriter(w, 6, 4, 3, ' ', 0)
	header := "SHARD\tHOLDER\tEPOCH\tRENEWED\tEXPIRES\tSTATE"
	if r.Scraped {
		header += "\tTOKEN_VALID\tWRITER_EPOCH\tSCRAPE"
	}
	fmt.Fprintln(tw, header)
	for _, row := range r.Rows {
		holder := row.Holder
		if holder == "" {
			holder = "-"
		}
		renewed := "never"
		if row.RenewedAgo != nil {
			renewed = relative(-*row.RenewedAgo)
		}
		expires := "-"
		if row.ExpiresIn != nil {
			expires = relative(*row.ExpiresIn)
		}
		state := string(row.State)
		if row.Note != "" {
			state += " (" + row.Note + ")"
		}
		line := fmt.Sprintf("%d\t%s\t%d\t%s\t%s\t%s", row.Shard, holder, row.Epoch, renewed, expires, state)
		if r.Scraped {
			line += "\t" + scrapeColumns(row)
		}
		fmt.Fprintln(tw, line)
	}
	return tw.Flush()
}

func scrapeColumns(row Row) string {
	s := row.Scrape
	if s == nil || row.Holder == "" {
		return "-\t-\t-"
	}
	valid, epoch, outcome := "?", "?", "ok"
	if s.TokenValid != nil {
		valid = "0"
		if *s.TokenValid {
			valid = "1"
		}
	}
	if s.Epoch != nil {
		epoch = strconv.FormatInt(*s.Epoch, 10)
	}
	if s.Err != "" {
		outcome = s.Err
	}
	return valid + "\t" + epoch + "\t" + outcome
}

// relative renders an offset from now: "in 13s" ahead, "4m2s ago" behind. Below ten seconds it
// keeps a decimal: that is the scale of a failover, where a whole second hides what happened.
func relative(d time.Duration) string {
	if d >= 0 {
		return "in " + human(d)
	}
	return human(-d) + " ago"
}

func human(d time.Duration) string {
	if d < 10*time.Second {
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	}
	return duration.HumanDuration(d)
}

// The JSON document (-o json). Its field names are an interface for scripts: fields may be added,
// never renamed or removed. README.md beside main.go documents each one.
type jsonReport struct {
	Namespace  string        `json:"namespace"`
	ObservedAt string        `json:"observedAt"`
	Leases     []jsonLease   `json:"leases"`
	Ignored    []jsonIgnored `json:"ignored"`
}

type jsonLease struct {
	Name                 string      `json:"name"`
	Shard                uint32      `json:"shard"`
	Holder               string      `json:"holder"`
	Pod                  string      `json:"pod"`
	Epoch                int32       `json:"epoch"`
	State                State       `json:"state"`
	RenewTime            *string     `json:"renewTime"`
	LeaseDurationSeconds *int64      `json:"leaseDurationSeconds"`
	RenewedAgoSeconds    *float64    `json:"renewedAgoSeconds"`
	ExpiresInSeconds     *float64    `json:"expiresInSeconds"`
	Note                 string      `json:"note"`
	Scrape               *jsonScrape `json:"scrape,omitempty"`
}

type jsonScrape struct {
	Pod        string `json:"pod"`
	TokenValid *bool  `json:"tokenValid"`
	Epoch      *int64 `json:"epoch"`
	Error      string `json:"error"`
}

type jsonIgnored struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// WriteJSON writes the report for scripts: one indented JSON document.
func WriteJSON(w io.Writer, r Report) error {
	doc := jsonReport{
		Namespace:  r.Namespace,
		ObservedAt: r.ObservedAt.UTC().Format(time.RFC3339Nano),
		Leases:     make([]jsonLease, 0, len(r.Rows)),
		Ignored:    make([]jsonIgnored, 0, len(r.Ignored)),
	}
	for _, row := range r.Rows {
		l := jsonLease{
			Name: row.Name, Shard: row.Shard, Holder: row.Holder, Pod: row.Pod, Epoch: row.Epoch,
			State: row.State, Note: row.Note,
			RenewedAgoSeconds: seconds(row.RenewedAgo),
			ExpiresInSeconds:  seconds(row.ExpiresIn),
		}
		if row.RenewTime != nil {
			s := row.RenewTime.UTC().Format(time.RFC3339Nano)
			l.RenewTime = &s
		}
		if row.LeaseDuration != nil {
			s := int64(*row.LeaseDuration / time.Second)
			l.LeaseDurationSeconds = &s
		}
		if r.Scraped && row.Scrape != nil {
			s := row.Scrape
			l.Scrape = &jsonScrape{Pod: s.Pod, TokenValid: s.TokenValid, Epoch: s.Epoch, Error: s.Err}
		}
		doc.Leases = append(doc.Leases, l)
	}
	for _, ig := range r.Ignored {
		doc.Ignored = append(doc.Ignored, jsonIgnored(ig))
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}

// seconds is d in seconds, to the millisecond; nil stays nil (JSON null).
func seconds(d *time.Duration) *float64 {
	if d == nil {
		return nil
	}
	s := d.Round(time.Millisecond).Seconds()
	return &s
}
