package world

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net/netip"
	"os"
	"path/filepath"
)

// SpecFormat is the format tag of a world spec; a spec with another tag is
// refused.
const SpecFormat = "micra-world/1"

// SpecFile is the name of the spec in a world directory; RegistryDir the
// subdirectory of the registry files.
const (
	SpecFile    = "world.json"
	RegistryDir = "registry"
)

// Spec is the JSON description of a world that Write stores and other
// processes read: where everything is, and the truth behind it (locations,
// last miles, bandwidths) for evaluating delegations. Params regenerate
// the whole world; Load checks that they still do.
type Spec struct {
	Format    string         `json:"format"`
	Params    Params         `json:"params"`
	Data      []DataFile     `json:"data"`
	DNS       string         `json:"dns"` // address:port of the DNS server
	Port      int            `json:"port"`
	Registry  []SpecRegistry `json:"registry"`
	Locations []Location     `json:"locations"` // every location used, by id
	Orgs      []SpecOrg      `json:"orgs"`
	Subnets   []SpecSubnet   `json:"subnets"`
	Nodes     []SpecNode     `json:"nodes"`
	Sites     []SpecSite     `json:"sites"`
}

// SpecRegistry is one registry file of the spec.
type SpecRegistry struct {
	Path   string `json:"path"` // relative to the world directory
	Format string `json:"format"`
}

// SpecOrg is one organisation.
type SpecOrg struct {
	Handle   string `json:"handle,omitempty"` // RPSL organisation handle
	Name     string `json:"name"`
	Kind     string `json:"kind"`
	Country  string `json:"country"`
	Registry string `json:"registry"`
	OpaqueID string `json:"opaque_id,omitempty"` // in the delegated files
	ASN      uint32 `json:"asn,omitempty"`
	Home     int    `json:"home"` // location id
}

// SpecSubnet is one range of the hierarchy with its true placement.
type SpecSubnet struct {
	Range     string  `json:"range"`
	Depth     int     `json:"depth"` // as subnet.Tree counts: 127/8 is 1
	Kind      string  `json:"kind"`
	Org       int     `json:"org"` // index into Orgs, -1 for none
	Location  int     `json:"location"`
	LastMile  float64 `json:"last_mile_ms"`
	Bandwidth float64 `json:"bandwidth_mbps"`
	Real      string  `json:"real,omitempty"` // the real range it was copied from (Params.FromReal)
}

// SpecNode is one node address.
type SpecNode struct {
	ID       int    `json:"id"`
	Addr     string `json:"addr"`
	Location int    `json:"location"`
	City     string `json:"city"`
	Country  string `json:"country"`
	Subnet   string `json:"subnet"`
}

// SpecSite is one site.
type SpecSite struct {
	ID         int          `json:"id"`
	Name       string       `json:"name"`
	Aliases    []string     `json:"aliases,omitempty"`
	Addrs      []string     `json:"addrs"`
	URL        string       `json:"url"`
	Kind       SiteKind     `json:"kind"`
	Org        int          `json:"org"`
	Location   int          `json:"location"`
	City       string       `json:"city"`
	Country    string       `json:"country"`
	Subnet     string       `json:"subnet"`
	Pages      int          `json:"pages"`
	Robots     RobotsPolicy `json:"robots"`
	CrawlDelay int          `json:"crawl_delay_s,omitempty"`
	Sitemap    bool         `json:"sitemap"`
	Feeds      bool         `json:"feeds"`
	Gzip       bool         `json:"gzip"`
	Validators bool         `json:"validators"`
	Flaky      bool         `json:"flaky"`
	Hostile    HostileKind  `json:"hostile,omitempty"`
}

var bkindNames = []string{"root", "registry", "allocation", "org-subnet", "shared-hosting", "customer", "sub-assignment", "residential", "unary", "real"}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

// buildSpec describes the world.
func (w *World) buildSpec() *Spec {
	sp := &Spec{
		Format: SpecFormat,
		Params: w.p,
		Data:   w.data,
		DNS:    netip.AddrPortFrom(w.dns, uint16(w.p.Port)).String(),
		Port:   w.p.Port,
	}
	for _, f := range w.files {
		sp.Registry = append(sp.Registry, SpecRegistry{Path: RegistryDir + "/" + f.Name, Format: f.Format.String()})
	}
	usedLoc := map[int]bool{w.defLoc: true}
	orgIdx := map[*org]int{}
	for i, o := range w.orgs {
		orgIdx[o] = i
		usedLoc[o.home] = true
		sp.Orgs = append(sp.Orgs, SpecOrg{Handle: o.handle, Name: o.name, Kind: o.kind.String(), Country: o.country,
			Registry: o.registry, OpaqueID: o.opaque, ASN: o.asn, Home: w.lat.locs[o.home].ID})
	}
	for i := range w.blocks {
		b := &w.blocks[i]
		usedLoc[b.loc] = true
		oi := -1
		if b.b.org != nil {
			oi = orgIdx[b.b.org]
		}
		sp.Subnets = append(sp.Subnets, SpecSubnet{Range: w.blockRange(i).String(), Depth: b.depth, Kind: bkindNames[b.b.kind], Org: oi,
			Location: w.lat.locs[b.loc].ID, LastMile: round3(b.lastMile), Bandwidth: round3(b.bw / mbit), Real: b.b.real})
	}
	for _, n := range w.Nodes() {
		sp.Nodes = append(sp.Nodes, SpecNode{ID: n.ID, Addr: n.Addr.String(), Location: n.Loc.ID, City: n.Loc.City, Country: n.Loc.Country, Subnet: n.Subnet.String()})
	}
	for _, s := range w.sites {
		site := w.site(s)
		ss := SpecSite{ID: s.id, Name: s.name, Aliases: s.aliases, URL: site.URL(w.p.Port), Kind: s.kind, Org: -1,
			Location: site.Loc.ID, City: site.Loc.City, Country: site.Loc.Country, Subnet: site.Subnet.String(),
			Pages: s.pages, Robots: s.robots, CrawlDelay: s.crawlDelay, Sitemap: s.sitemap, Feeds: s.feeds, Gzip: s.gzip,
			Validators: s.validators, Flaky: s.flaky, Hostile: s.hostile}
		if s.org != nil {
			ss.Org = orgIdx[s.org]
		}
		for _, a := range site.Addrs {
			ss.Addrs = append(ss.Addrs, a.String())
		}
		sp.Sites = append(sp.Sites, ss)
	}
	for i, l := range w.lat.locs {
		if usedLoc[i] {
			sp.Locations = append(sp.Locations, l)
		}
	}
	for i := range sp.Locations {
		sp.Locations[i].Lat = round3(sp.Locations[i].Lat)
		sp.Locations[i].Lon = round3(sp.Locations[i].Lon)
	}
	return sp
}

func (w *World) encodeSpec() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", " ")
	if err := enc.Encode(w.buildSpec()); err != nil {
		return nil, fmt.Errorf("encoding spec: %w", err)
	}
	return buf.Bytes(), nil
}

// Spec returns the world's spec, as Write stores it in world.json.
func (w *World) Spec() []byte { return bytes.Clone(w.spec) }

// Write stores the spec (world.json) and the registry files
// (registry/...) in dir, creating it. The bytes depend only on the Params
// and the data files.
func (w *World) Write(dir string) error {
	if err := os.MkdirAll(filepath.Join(dir, RegistryDir), 0o755); err != nil {
		return err
	}
	for _, f := range w.files {
		if err := os.WriteFile(filepath.Join(dir, RegistryDir, f.Name), f.Data, 0o644); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(dir, SpecFile), w.spec, 0o644)
}

// ReadSpec reads and checks the spec of the world in dir.
func ReadSpec(dir string) (*Spec, []byte, error) {
	data, err := os.ReadFile(filepath.Join(dir, SpecFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("%s: no %s: generate one with \"micra world gen\"", dir, SpecFile)
	}
	if err != nil {
		return nil, nil, err
	}
	var sp Spec
	if err := json.Unmarshal(data, &sp); err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %v", ErrSpecMismatch, SpecFile, err)
	}
	if sp.Format != SpecFormat {
		return nil, nil, fmt.Errorf("%w: format %q, want %q", ErrSpecMismatch, sp.Format, SpecFormat)
	}
	return &sp, data, nil
}

// Load regenerates the world whose spec is in dir, reading the data from
// dataDir ("" finds it, see FindDataDir), and checks that it is the world
// the spec describes byte for byte: same data files, same generator.
func Load(ctx context.Context, dir, dataDir string) (*World, error) {
	sp, data, err := ReadSpec(dir)
	if err != nil {
		return nil, err
	}
	p := sp.Params
	p.DataDir = dataDir
	w, err := Generate(ctx, p)
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(w.spec, data) {
		for i, f := range w.data {
			if i < len(sp.Data) && sp.Data[i] != f {
				return nil, fmt.Errorf("%w: data file %s has changed (sha256 %s, spec says %s)", ErrSpecMismatch, f.Path, f.SHA256, sp.Data[i].SHA256)
			}
		}
		return nil, fmt.Errorf("%w: %s differs from the world its parameters generate (edited, or written by another version)", ErrSpecMismatch, filepath.Join(dir, SpecFile))
	}
	return w, nil
}
