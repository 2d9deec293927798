package webhook

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// errTooLarge marks a ConfigMap whose relevant keys hold more than a review may keep.
var errTooLarge = errors.New("its keys the guard must read are larger than a review may hold")

// maxSkimDepth bounds the nesting skimConfigMap follows (metadata is a few levels deep).
const maxSkimDepth = 64

// skimConfigMap reads a ConfigMap's JSON from r and keeps only the .data entries keep accepts,
// at most maxKept bytes of them; everything else is scanned past without being held, so a
// ConfigMap of any size costs a small buffer plus what is kept. It returns the kept data and the
// bytes read.
func skimConfigMap(r io.Reader, keep func(string) bool, maxKept int) (map[string]string, int64, error) {
	cr := &countingReader{r: r}
	s := &skimmer{r: bufio.NewReaderSize(cr, 16<<10)}
	data, err := s.configMap(keep, maxKept)
	return data, cr.n, err
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

type skimmer struct {
	r *bufio.Reader
}

func (s *skimmer) configMap(keep func(string) bool, maxKept int) (map[string]string, error) {
	data := map[string]string{}
	err := s.object(func(key string) error {
		if key != "data" {
			return s.skip(1)
		}
		c, err := s.peek()
		if err != nil {
			return err
		}
		if c == 'n' {
			return s.skip(1)
		}
		kept := 0
		return s.object(func(k string) error {
			if !keep(k) {
				return s.skip(2)
			}
			raw, whole, err := s.str(maxKept - kept + 2)
			if err != nil {
				return err
			}
			if !whole {
				return errTooLarge
			}
			var v string
			if err := json.Unmarshal(raw, &v); err != nil {
				return fmt.Errorf("value of %q: %w", k, err)
			}
			kept += len(v)
			data[k] = v
			return nil
		})
	})
	return data, err
}

// peek returns the next byte that is not white space, without consuming it.
func (s *skimmer) peek() (byte, error) {
	for {
		c, err := s.r.ReadByte()
		if err != nil {
			return 0, unexpected(err)
		}
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		}
		return c, s.r.UnreadByte()
	}
}

func (s *skimmer) expect(want byte) error {
	c, err := s.peek()
	if err != nil {
		return err
	}
	if c != want {
		return fmt.Errorf("want %q, got %q", want, c)
	}
	_, _ = s.r.ReadByte()
	return nil
}

// object reads {"key": value, ...}, calling member after each key's colon to read its value.
func (s *skimmer) object(member func(key string) error) error {
	if err := s.expect('{'); err != nil {
		return err
	}
	for first := true; ; first = false {
		c, err := s.peek()
		if err != nil {
			return err
		}
		if c == '}' {
			_, _ = s.r.ReadByte()
			return nil
		}
		if !first {
			if err := s.expect(','); err != nil {
				return err
			}
		}
		raw, whole, err := s.str(4 << 10) // ConfigMap keys are at most 253 bytes
		if err != nil {
			return err
		}
		key := "\x00too long"
		if whole {
			if err := json.Unmarshal(raw, &key); err != nil {
				return fmt.Errorf("a key: %w", err)
			}
		}
		if err := s.expect(':'); err != nil {
			return err
		}
		if err := member(key); err != nil {
			return err
		}
	}
}

// str reads one JSON string literal. It returns it raw (quotes and escapes included) when it
// fits in limit bytes; otherwise it reads past it and returns whole=false.
func (s *skimmer) str(limit int) (raw []byte, whole bool, err error) {
	if err := s.expect('"'); err != nil {
		return nil, false, err
	}
	whole = limit >= 2
	if whole {
		raw = append(raw, '"')
	}
	for {
		chunk, err := s.r.ReadSlice('"')
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return nil, false, unexpected(err)
		}
		if whole {
			if len(raw)+len(chunk) > limit {
				whole, raw = false, nil
			} else {
				raw = append(raw, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			// A backslash at the very end of the buffer escapes whatever comes next.
			if chunk[len(chunk)-1] == '\\' && oddBackslashes(chunk) {
				c, err := s.r.ReadByte()
				if err != nil {
					return nil, false, unexpected(err)
				}
				if whole {
					raw = append(raw, c)
				}
			}
			continue
		}
		// chunk ends with '"': the end, unless an odd run of backslashes escapes it.
		if !oddBackslashes(chunk[:len(chunk)-1]) {
			return raw, whole, nil
		}
	}
}

// oddBackslashes reports whether b ends in an odd number of backslashes.
func oddBackslashes(b []byte) bool {
	n := 0
	for i := len(b) - 1; i >= 0 && b[i] == '\\'; i-- {
		n++
	}
	return n%2 == 1
}

// skip reads past one value of any kind.
func (s *skimmer) skip(depth int) error {
	if depth > maxSkimDepth {
		return errors.New("nested too deeply")
	}
	c, err := s.peek()
	if err != nil {
		return err
	}
	switch c {
	case '"':
		_, _, err := s.str(0)
		return err
	case '{':
		return s.object(func(string) error { return s.skip(depth + 1) })
	case '[':
		_, _ = s.r.ReadByte()
		for first := true; ; first = false {
			c, err := s.peek()
			if err != nil {
				return err
			}
			if c == ']' {
				_, _ = s.r.ReadByte()
				return nil
			}
			if !first {
				if err := s.expect(','); err != nil {
					return err
				}
			}
			if err := s.skip(depth + 1); err != nil {
				return err
			}
		}
	default:
		// A number, true, false or null: read to the next delimiter.
		n := 0
		for {
			c, err := s.r.ReadByte()
			if err != nil {
				return unexpected(err)
			}
			if c == ',' || c == '}' || c == ']' || c == ' ' || c == '\n' || c == '\t' || c == '\r' {
				if n == 0 {
					return fmt.Errorf("unexpected %q", c)
				}
				return s.r.UnreadByte()
			}
			n++
		}
	}
}

func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
