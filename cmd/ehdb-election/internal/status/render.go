package status

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/printers"
)

// Report is one view of the shard Leases of a namespace, or of every namespace.
type Report struct {
	Namespace     string // "" when AllNamespaces
	AllNamespaces bool
	ObservedAt    time.Time // the instant the rows were computed at, on the API server's clock when known
	// Skew is this machine's clock minus the API server's, as estimated from the answers' Date
	// headers (see EstimateSkew); meaningful only when ServerClock is set. Without ServerClock the
	// view was judged on this machine's clock: no answer carried a Date header.
	Skew        time.Duration
	ServerClock bool
	Rows        []Row
	Ignored     []Ignored
	// Scraped says the rows carry the holder pods' scrape (the table grows its columns).
	Scraped bool
}

// Output formats of -o.
const (
	FormatTable = "table"
	FormatWide  = "wide"
	FormatJSON  = "json"
	FormatYAML  = "yaml"
)

// Formats are the values -o accepts, in the order usage lists them.
var Formats = []string{FormatTable, FormatWide, FormatJSON, FormatYAML}

// Printer writes reports in one output format with cli-runtime's printers. One Printer prints
// every draw of a watch: YAML documents after the first are preceded by "---".
type Printer struct {
	format string
	yaml   printers.YAMLPrinter
}

// NewPrinter returns the printer of format ("" is the table).
func NewPrinter(format string) (*Printer, error) {
	if format == "" {
		format = FormatTable
	}
	if !slices.Contains(Formats, format) {
		return nil, fmt.Errorf("--output %q: must be one of %s", format, strings.Join(Formats, ", "))
	}
	return &Printer{format: format}, nil
}

// Format is the printer's output format.
func (p *Printer) Format() string { return p.format }

// Print writes one report.
func (p *Printer) Print(w io.Writer, r Report) error {
	switch p.format {
	case FormatJSON:
		return (&printers.JSONPrinter{}).PrintObj(NewDocument(r), w)
	case FormatYAML:
		return p.yaml.PrintObj(NewDocument(r), w)
	}
	// A new table printer per draw: cli-runtime's prints the header only when the columns change,
	// and every draw of a watch is a whole table.
	tp := printers.NewTablePrinter(printers.PrintOptions{WithNamespace: r.AllNamespaces, Wide: p.format == FormatWide})
	return tp.PrintObj(Table(r), w)
}

// WriteTable writes the human view: one line per shard Lease, kubectl-style columns.
func WriteTable(w io.Writer, r Report) error {
	return (&Printer{format: FormatTable}).Print(w, r)
}

// WriteJSON writes the report for scripts: one indented JSON document.
func WriteJSON(w io.Writer, r Report) error {
	return (&Printer{format: FormatJSON}).Print(w, r)
}

// Table is the report as a metav1.Table, the form cli-runtime's table printer takes: it adds the
// NAMESPACE column (-A), hides the wide columns (priority 1) unless -o wide, and aligns the rest.
func Table(r Report) *metav1.Table {
	cols := []metav1.TableColumnDefinition{
		{Name: "Shard", Type: "integer", Description: "the shard, decoded from the Lease name's hex suffix"},
		{Name: "Holder", Type: "string", Description: "spec.holderIdentity, <pod>#<uuid>; - when released"},
		{Name: "Epoch", Type: "integer", Description: "spec.leaseTransitions: the (last) holder's fencing token"},
		{Name: "Renewed", Type: "string", Description: "time since spec.renewTime, on the API server's clock"},
		{Name: "Expires", Type: "string", Description: "renewTime + leaseDurationSeconds, relative to now"},
		{Name: "State", Type: "string", Description: "live, expired or released"},
	}
	if r.Scraped {
		cols = append(cols,
			metav1.TableColumnDefinition{Name: "Token_Valid", Type: "string", Description: "the holder pod's ehdb_election_token_valid"},
			metav1.TableColumnDefinition{Name: "Writer_Epoch", Type: "string", Description: "the holder pod's ehdb_election_epoch"},
			metav1.TableColumnDefinition{Name: "Scrape", Type: "string", Description: "ok, or why the pod could not be read"},
		)
	}
	cols = append(cols,
		metav1.TableColumnDefinition{Name: "Lease", Type: "string", Format: "name", Priority: 1, Description: "the Lease's name"},
		metav1.TableColumnDefinition{Name: "Duration", Type: "string", Priority: 1, Description: "spec.leaseDurationSeconds"},
		metav1.TableColumnDefinition{Name: "Renew_Time", Type: "string", Priority: 1, Description: "spec.renewTime (UTC)"},
		metav1.TableColumnDefinition{Name: "Expiry", Type: "string", Priority: 1, Description: "renewTime + leaseDurationSeconds (UTC)"},
	)
	t := &metav1.Table{
		TypeMeta:          metav1.TypeMeta{APIVersion: metav1.SchemeGroupVersion.String(), Kind: "Table"},
		ColumnDefinitions: cols,
		Rows:              make([]metav1.TableRow, 0, len(r.Rows)),
	}
	for _, row := range r.Rows {
		holder := cell(row.Holder)
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
			state += " (" + cell(row.Note) + ")"
		}
		cells := []any{row.Shard, holder, row.Epoch, renewed, expires, state}
		if r.Scraped {
			valid, epoch, outcome := scrapeColumns(row)
			cells = append(cells, valid, epoch, cell(outcome))
		}
		duration, renewTime, expiry := "-", "-", "-"
		if row.LeaseDuration != nil {
			duration = row.LeaseDuration.String()
		}
		if row.RenewTime != nil {
			renewTime = row.RenewTime.UTC().Format(rfc3339Micro)
			if row.LeaseDuration != nil && row.Holder != "" {
				expiry = row.RenewTime.Add(*row.LeaseDuration).UTC().Format(rfc3339Micro)
			}
		}
		cells = append(cells, row.Name, duration, renewTime, expiry)
		t.Rows = append(t.Rows, metav1.TableRow{
			Cells: cells,
			// The table printer reads the NAMESPACE column from the row's object.
			Object: runtime.RawExtension{Object: &metav1.PartialObjectMetadata{
				TypeMeta:   metav1.TypeMeta{APIVersion: coordinationv1.SchemeGroupVersion.String(), Kind: "Lease"},
				ObjectMeta: metav1.ObjectMeta{Namespace: row.Namespace, Name: row.Name},
			}},
		})
	}
	return t
}

// rfc3339Micro is the precision of a Lease's MicroTime.
const rfc3339Micro = "2006-01-02T15:04:05.000000Z07:00"

// cell makes a string read from a Lease (or said about one) safe for a terminal table. A holder
// identity is whatever its writer put there: a newline would forge a row, a tab a column, an escape
// sequence would drive the terminal. Such a value is shown Go-quoted (without the quotes), so the
// operator sees exactly what is in the Lease.
func cell(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) < 0 {
		return s
	}
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}

func scrapeColumns(row Row) (valid, epoch, outcome string) {
	s := row.Scrape
	if s == nil || row.Holder == "" {
		return "-", "-", "-"
	}
	valid, epoch, outcome = "?", "?", "ok"
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
	return valid, epoch, outcome
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

// The document of -o json and -o yaml. Its field names are an interface for scripts: fields may be
// added, never renamed or removed. README.md beside main.go documents each one.

// The document's apiVersion and kind: cli-runtime's printers print only objects that say what
// they are, and a script can tell this document from a kubectl one.
const (
	DocumentAPIVersion = "ehdb.noetl.io/v1alpha1"
	DocumentKind       = "ShardLeaseStatus"
)

// Document is a Report as scripts read it.
type Document struct {
	metav1.TypeMeta `json:",inline"`
	Namespace       string            `json:"namespace"`
	AllNamespaces   bool              `json:"allNamespaces"`
	ObservedAt      string            `json:"observedAt"`
	Clock           DocumentClock     `json:"clock"`
	Leases          []DocumentLease   `json:"leases"`
	Ignored         []DocumentIgnored `json:"ignored"`
}

// DocumentClock says which clock liveness was judged on.
type DocumentClock struct {
	// Source is "apiserver" (this machine's clock corrected by the answers' Date headers) or
	// "local" (no answer carried one).
	Source string `json:"source"`
	// SkewSeconds is this machine's clock minus the API server's; null when Source is "local".
	SkewSeconds *float64 `json:"skewSeconds"`
}

// DocumentLease is one shard Lease.
type DocumentLease struct {
	Namespace            string          `json:"namespace"`
	Name                 string          `json:"name"`
	Shard                uint32          `json:"shard"`
	Holder               string          `json:"holder"`
	Pod                  string          `json:"pod"`
	Epoch                int32           `json:"epoch"`
	State                State           `json:"state"`
	RenewTime            *string         `json:"renewTime"`
	LeaseDurationSeconds *int64          `json:"leaseDurationSeconds"`
	RenewedAgoSeconds    *float64        `json:"renewedAgoSeconds"`
	ExpiresInSeconds     *float64        `json:"expiresInSeconds"`
	Note                 string          `json:"note"`
	Scrape               *DocumentScrape `json:"scrape,omitempty"`
}

// DocumentScrape is what the holder pod's /metrics said (--scrape).
type DocumentScrape struct {
	Pod        string `json:"pod"`
	TokenValid *bool  `json:"tokenValid"`
	Epoch      *int64 `json:"epoch"`
	Error      string `json:"error"`
}

// DocumentIgnored is a Lease named like a shard Lease that does not decode.
type DocumentIgnored struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Reason    string `json:"reason"`
}

// DeepCopyObject implements runtime.Object.
func (d *Document) DeepCopyObject() runtime.Object {
	c := *d
	c.Leases = make([]DocumentLease, len(d.Leases))
	for i, l := range d.Leases {
		l.RenewTime = copyPtr(l.RenewTime)
		l.LeaseDurationSeconds = copyPtr(l.LeaseDurationSeconds)
		l.RenewedAgoSeconds = copyPtr(l.RenewedAgoSeconds)
		l.ExpiresInSeconds = copyPtr(l.ExpiresInSeconds)
		if l.Scrape != nil {
			s := *l.Scrape
			s.TokenValid, s.Epoch = copyPtr(s.TokenValid), copyPtr(s.Epoch)
			l.Scrape = &s
		}
		c.Leases[i] = l
	}
	c.Ignored = slices.Clone(d.Ignored)
	c.Clock.SkewSeconds = copyPtr(d.Clock.SkewSeconds)
	return &c
}

func copyPtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// NewDocument is the report as the document of -o json and -o yaml.
func NewDocument(r Report) *Document {
	doc := &Document{
		TypeMeta:      metav1.TypeMeta{APIVersion: DocumentAPIVersion, Kind: DocumentKind},
		Namespace:     r.Namespace,
		AllNamespaces: r.AllNamespaces,
		ObservedAt:    r.ObservedAt.UTC().Format(time.RFC3339Nano),
		Clock:         DocumentClock{Source: "local"},
		Leases:        make([]DocumentLease, 0, len(r.Rows)),
		Ignored:       make([]DocumentIgnored, 0, len(r.Ignored)),
	}
	if r.ServerClock {
		doc.Clock = DocumentClock{Source: "apiserver", SkewSeconds: seconds(&r.Skew)}
	}
	for _, row := range r.Rows {
		l := DocumentLease{
			Namespace: row.Namespace, Name: row.Name, Shard: row.Shard, Holder: row.Holder, Pod: row.Pod,
			Epoch: row.Epoch, State: row.State, Note: row.Note,
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
			l.Scrape = &DocumentScrape{Pod: s.Pod, TokenValid: s.TokenValid, Epoch: s.Epoch, Error: s.Err}
		}
		doc.Leases = append(doc.Leases, l)
	}
	for _, ig := range r.Ignored {
		doc.Ignored = append(doc.Ignored, DocumentIgnored(ig))
	}
	return doc
}

// seconds is d in seconds, to the millisecond; nil stays nil (JSON null).
func seconds(d *time.Duration) *float64 {
	if d == nil {
		return nil
	}
	s := d.Round(time.Millisecond).Seconds()
	return &s
}
