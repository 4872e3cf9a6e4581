package scrape

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	line := "4242 (xla ned) (x) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 12 0 100 1000 200 18446744073709551615"
	d, err := parseStat(line)
	if err != nil || d != 3250*time.Millisecond {
		t.Fatalf("parseStat: %v %v, want 3.25s (325 ticks)", d, err)
	}
	if _, err := CPUTime(os.Getpid()); err != nil {
		t.Fatalf("own CPU time: %v", err)
	}
}

func TestScrapeLoad(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "# HELP a x\n# TYPE a counter\na 1\nb{c=\"d\"} 2\n")
	}))
	defer srv.Close()
	stop := Start(Client(""), srv.URL, 20*time.Millisecond, os.Getpid())
	time.Sleep(110 * time.Millisecond)
	r := stop()
	if r.OK() < 3 || r.OK() != len(r.Scrapes) {
		t.Fatalf("%d of %d scrapes ok", r.OK(), len(r.Scrapes))
	}
	if l := r.Last(); l.Series != 2 || l.Bytes == 0 {
		t.Errorf("last scrape %+v, want 2 series", l)
	}
	if r.Quantile(0.5) <= 0 || r.Quantile(0.99) < r.Quantile(0.5) {
		t.Errorf("quantiles %v %v", r.Quantile(0.5), r.Quantile(0.99))
	}
}
