package knowledge

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"unicode/utf8"
)

// MaxConfigBytes bounds a configuration-like file: a knowledge config,
// knowdb.toml, a create.sql (1 MiB), as files.rs.
const MaxConfigBytes = 1 << 20

// MaxCSVLineBytes is the longest line a knowdb CSV file may hold (1 MiB).
const MaxCSVLineBytes = 1 << 20

// openRegular opens path for reading without blocking (a FIFO would wait
// for a writer) and refuses anything but a regular file, checked on the
// file it holds.
func openRegular(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !info.Mode().IsRegular() {
		f.Close()
		kind := "not a regular file (a FIFO, socket or device)"
		if info.IsDir() {
			kind = "a directory"
		}
		return nil, fmt.Errorf("%s: %s: omlet reads only regular files here", path, kind)
	}
	return f, nil
}

// readText reads the regular file at path, at most max bytes of UTF-8;
// what names the kind of file for the error.
func readText(path string, max int64, what string) (string, error) {
	f, err := openRegular(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	if int64(len(b)) > max {
		return "", &LimitError{Limit: "file bytes", Message: fmt.Sprintf("%s: more than %d bytes, the most a %s may take", path, max, what)}
	}
	if !utf8.Valid(b) {
		return "", fmt.Errorf("%s: not UTF-8", path)
	}
	return string(b), nil
}

// folder is the folder the files a file names are found from.
func folder(path string) string {
	d := filepath.Dir(path)
	if d == "" {
		return "."
	}
	return d
}

// lineBound reads on while no line is longer than max bytes.
type lineBound struct {
	r    io.Reader
	run  int64
	line int64
	max  int64
}

func (l *lineBound) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	for _, b := range p[:n] {
		if b == '\n' {
			l.run = 0
			l.line++
			continue
		}
		l.run++
		if l.run > l.max {
			return 0, fmt.Errorf("line %d is longer than %d bytes, the most a knowdb CSV line may take", l.line, l.max)
		}
	}
	return n, err
}

// openLines opens a knowdb CSV file whose lines may each be at most
// MaxCSVLineBytes long.
func openLines(path string) (io.ReadCloser, error) {
	f, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	return struct {
		io.Reader
		io.Closer
	}{bufio.NewReader(&lineBound{r: f, line: 1, max: MaxCSVLineBytes}), f}, nil
}
