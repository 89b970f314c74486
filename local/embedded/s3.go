package embedded

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// S3 starts an S3-compatible server (gofakes3) on a loopback port whose
// objects are kept in files under dir, and returns its endpoint URL. Any
// access key is accepted.
//
// Objects are served from memory (gofakes3's s3mem, which passes the
// shared/blob suite) and written through to one file each before a write is
// answered, by rename, so a file is always a whole object: an object whose
// PUT was answered is kept whenever the process dies afterwards, and one
// whose PUT was not is either whole or absent. On start every file is loaded
// back. gofakes3's own bbolt backend is not used: it hands out object bytes
// that alias its memory map after the transaction ends, which faults once
// a write grows the file.
//
// The server listens on the port of the previous run when it is free, so
// download URLs handed out before a restart keep working until they
// expire. Multipart uploads in progress are held in memory by gofakes3 and
// are lost with the process; the client starts them again.
func S3(dir string) (endpoint string, stop func() error, err error) {
	h, err := S3Handler(dir)
	if err != nil {
		return "", nil, err
	}
	ln, err := listenAgain(filepath.Join(dir, "addr"))
	if err != nil {
		return "", nil, fmt.Errorf("listen for embedded s3: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), srv.Close, nil
}

// S3Handler is the server [S3] runs, with its objects in dir, for tests
// that serve it themselves (the shared/blob suite runs on it).
func S3Handler(dir string) (http.Handler, error) {
	backend, err := openDiskBackend(filepath.Join(dir, "buckets"))
	if err != nil {
		return nil, err
	}
	return gofakes3.New(backend).Server(), nil
}

// listenAgain listens on the loopback address recorded in file when it is
// free, on a new port otherwise, and records the address it got.
func listenAgain(file string) (net.Listener, error) {
	if b, err := os.ReadFile(file); err == nil {
		if ln, err := net.Listen("tcp", strings.TrimSpace(string(b))); err == nil {
			return ln, nil
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(file, []byte(ln.Addr().String()+"\n"), 0o644); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// diskBackend is s3mem with every change written through to dir: a folder
// per bucket, a file per object (a JSON header line with the key and
// metadata, then the bytes), named by the hash of the key. Only the plain
// Backend methods are promoted, so gofakes3 sees no versioning, which
// would change objects behind the files' back.
type diskBackend struct {
	gofakes3.Backend
	dir string
	// mu orders the changes: memory and files change in the same order.
	mu sync.Mutex
}

// objectHeader is the first line of an object's file.
type objectHeader struct {
	Key  string            `json:"key"`
	Meta map[string]string `json:"meta"`
}

func openDiskBackend(dir string) (*diskBackend, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("embedded s3 directory: %w", err)
	}
	d := &diskBackend{Backend: s3mem.New(), dir: dir}
	buckets, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read embedded s3 buckets: %w", err)
	}
	for _, b := range buckets {
		if !b.IsDir() {
			continue
		}
		if err := d.Backend.CreateBucket(b.Name()); err != nil {
			return nil, fmt.Errorf("load embedded s3 bucket %s: %w", b.Name(), err)
		}
		files, err := os.ReadDir(filepath.Join(dir, b.Name()))
		if err != nil {
			return nil, fmt.Errorf("read embedded s3 bucket %s: %w", b.Name(), err)
		}
		for _, f := range files {
			path := filepath.Join(dir, b.Name(), f.Name())
			if !strings.HasSuffix(f.Name(), ".obj") {
				_ = os.Remove(path) // a write the process died in
				continue
			}
			if err := d.load(b.Name(), path); err != nil {
				return nil, err
			}
		}
	}
	return d, nil
}

// load puts the object in path back into memory.
func (d *diskBackend) load(bucket, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("load embedded s3 object: %w", err)
	}
	defer f.Close()
	r := bufio.NewReader(f)
	line, err := r.ReadBytes('\n')
	var h objectHeader
	if err == nil {
		err = json.Unmarshal(line, &h)
	}
	if err != nil {
		return fmt.Errorf("load embedded s3 object %s: bad header: %v", path, err)
	}
	body, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("load embedded s3 object %s: %w", path, err)
	}
	if _, err := d.Backend.PutObject(bucket, h.Key, h.Meta, bytes.NewReader(body), int64(len(body)), nil); err != nil {
		return fmt.Errorf("load embedded s3 object %s: %w", path, err)
	}
	return nil
}

func (d *diskBackend) objectPath(bucket, key string) string {
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(d.dir, bucket, hex.EncodeToString(sum[:])+".obj")
}

// CreateBucket creates the bucket and its folder.
func (d *diskBackend) CreateBucket(name string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.Backend.CreateBucket(name); err != nil {
		return err
	}
	return os.MkdirAll(filepath.Join(d.dir, name), 0o755)
}

// DeleteBucket deletes an empty bucket and its folder.
func (d *diskBackend) DeleteBucket(name string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.Backend.DeleteBucket(name); err != nil {
		return err
	}
	return os.RemoveAll(filepath.Join(d.dir, name))
}

// ForceDeleteBucket deletes the bucket, its objects and its folder.
func (d *diskBackend) ForceDeleteBucket(name string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.Backend.ForceDeleteBucket(name); err != nil {
		return err
	}
	return os.RemoveAll(filepath.Join(d.dir, name))
}

// PutObject stores the object in memory, then in its file, and only then
// answers.
func (d *diskBackend) PutObject(bucket, key string, meta map[string]string, input io.Reader, size int64,
	conditions *gofakes3.PutConditions) (gofakes3.PutObjectResult, error) {
	body, err := gofakes3.ReadAll(input, size)
	if err != nil {
		return gofakes3.PutObjectResult{}, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	res, err := d.Backend.PutObject(bucket, key, meta, bytes.NewReader(body), int64(len(body)), conditions)
	if err != nil {
		return res, err
	}
	// The metadata as stored: s3mem merges in what the key held before.
	obj, err := d.Backend.HeadObject(bucket, key)
	if err != nil {
		return res, err
	}
	return res, d.write(bucket, key, obj.Metadata, body)
}

// write replaces the object's file by rename, so it is never torn.
func (d *diskBackend) write(bucket, key string, meta map[string]string, body []byte) error {
	header, err := json.Marshal(objectHeader{Key: key, Meta: meta})
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Join(d.dir, bucket), ".put-*")
	if err != nil {
		return fmt.Errorf("store object %s: %w", key, err)
	}
	_, err = f.Write(append(header, '\n'))
	if err == nil {
		_, err = f.Write(body)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), d.objectPath(bucket, key))
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("store object %s: %w", key, err)
	}
	return nil
}

// CopyObject copies through GetObject and PutObject, so the copy is
// written through like any other object.
func (d *diskBackend) CopyObject(srcBucket, srcKey, dstBucket, dstKey string, meta map[string]string) (gofakes3.CopyObjectResult, error) {
	return gofakes3.CopyObject(d, srcBucket, srcKey, dstBucket, dstKey, meta)
}

// DeleteObject deletes the object from memory and its file.
func (d *diskBackend) DeleteObject(bucket, key string) (gofakes3.ObjectDeleteResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	res, err := d.Backend.DeleteObject(bucket, key)
	if err != nil {
		return res, err
	}
	return res, d.remove(bucket, key)
}

// DeleteMulti deletes objects from memory and their files.
func (d *diskBackend) DeleteMulti(bucket string, keys ...string) (gofakes3.MultiDeleteResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	res, err := d.Backend.DeleteMulti(bucket, keys...)
	if err != nil {
		return res, err
	}
	for _, deleted := range res.Deleted {
		if err := d.remove(bucket, deleted.Key); err != nil {
			return res, err
		}
	}
	return res, nil
}

func (d *diskBackend) remove(bucket, key string) error {
	if err := os.Remove(d.objectPath(bucket, key)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("delete object %s: %w", key, err)
	}
	return nil
}
