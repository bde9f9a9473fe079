package world

import (
	"cmp"
	"fmt"
	"time"

	"github.com/micra-net/micra/internal/check"
)

// Params describes a world. Generate gives the same world, byte for byte,
// for the same Params and data files. Start with DefaultParams and change
// what a test needs; the zero value is not valid.
//
// Fractions are of all sites unless said otherwise and must lie in [0, 1].
// Times and RTTs are unscaled: the time scale of a running world (see
// TimeScale) shrinks delays, never the numbers reported here.
type Params struct {
	Seed     int64  `json:"seed"`
	Sites    int    `json:"sites"`     // number of web sites, 1 to 100,000
	Nodes    int    `json:"nodes"`     // number of volunteer node addresses, 1 to 10,000
	FromReal bool   `json:"from_real"` // derive the allocation structure from the real RIR and ip2asn data
	DataDir  string `json:"-"`         // the data directory; "" finds it (see FindDataDir)
	// Latency is where the RTTs come from: LatencyMatrix (the real matrix
	// in the data directory), LatencyModel (the embedded model fitted to
	// it) or "" for the matrix when the data directory has it, else the
	// model. Generate records the one it used, so that a spec names it.
	Latency string `json:"latency"`
	// Geo, when not "", is a geolocation file (package geo's CSV format,
	// such as DB-IP's, DBIPFile under the data directory): the world's
	// sites are Sites of its rows, at their real places, in the part of
	// the built-in real hierarchy that holds them, remapped into 127/8
	// with its shape (see fromgeo.go). Not with FromReal.
	Geo string `json:"geo,omitempty"`
	// GeoOrg, with Geo, keeps only the rows whose range belongs to an
	// organisation whose name contains it (OrgFilter): one organisation's
	// prefixes, such as a cloud's.
	GeoOrg string `json:"geo_org,omitempty"`

	// Port is the TCP port of every site and the TCP and UDP port of the
	// DNS server, on their own loopback addresses. 0 makes Start choose a
	// free port (URLs in the spec then show port 0).
	Port int `json:"port"`

	// Structure of the registry hierarchy and the anomalies IPMicra meets.
	MaxDepth       int     `json:"max_depth"`        // deepest level, 127/8 being level 1 and unary ranges the deepest; 4 to 8 (8)
	International  float64 `json:"international"`    // of hosting and enterprise organisations: subnets in several far-apart places (0.25)
	AdjacentFar    float64 `json:"adjacent_far"`     // of customer subnets (from real data, also of shared-hosting subnets): placed far from their parent and siblings, in another country (0.15)
	OtherCity      float64 `json:"other_city"`       // of customer subnets (from real data, also of shared-hosting subnets and an allocation's routed ranges): in another city of their parent's country (0.35)
	FarRTT         float64 `json:"far_rtt_ms"`       // RTT in ms that counts as far apart (100)
	SharedHosting  float64 `json:"shared_hosting"`   // sites in shared-hosting subnets (0.3)
	SharedSize     int     `json:"shared_size"`      // sites per shared-hosting subnet (40)
	SitesPerAddr   int     `json:"sites_per_addr"`   // sites sharing one address in shared hosting, name-based (1)
	CDN            float64 `json:"cdn"`              // CDN-like sites, with one address per point of presence (0.02)
	CDNPoPs        int     `json:"cdn_pops"`         // points of presence of a CDN, spread far apart (8)
	SelfHosted     float64 `json:"self_hosted"`      // sites of enterprises on their own (PI) or ISP-assigned (PA) space (0.15)
	ISPHosted      float64 `json:"isp_hosted"`       // sites on small business lines of access ISPs (0.07)
	MultiAlloc     float64 `json:"multi_alloc"`      // of organisations: address space split over several allocations (0.2)
	Unary          float64 `json:"unary"`            // of site addresses: registered as a unary (one-address) range (0.1)
	NodesAtHosting float64 `json:"nodes_at_hosting"` // of nodes: in a data centre rather than an access ISP, where one is in the city (0.2)
	StaleCountry   float64 `json:"stale_country"`    // of relocated subnets: the registry still names the parent's country (0.2)

	// Latency model.
	IntraCityRTT float64 `json:"intra_city_rtt_ms"` // RTT in ms between two places in the same city, before last miles (2)
	Jitter       float64 `json:"jitter"`            // multiplier of the per-request jitter; 0 disables it (1)
	DefaultCity  string  `json:"default_city"`      // location of addresses outside every subnet ("Frankfurt")

	// Content.
	MeanPages      int           `json:"mean_pages"`       // mean pages per site, log-normal (20)
	PageWeight     int           `json:"page_weight"`      // mean bytes of a site's theme on every page (inline CSS, scripts, icons), log-normal over sites; 0 for bare pages (24000)
	MaxPages       int           `json:"max_pages"`        // most pages of one site (400)
	CrossLinks     float64       `json:"cross_links"`      // mean links per page to other sites, heavy-tailed (1.5)
	Popularity     float64       `json:"popularity"`       // Zipf exponent of link targets over sites (1.0)
	BrokenLinks    float64       `json:"broken_links"`     // of links: to a missing page or an unknown host (0.02)
	ChangeFraction float64       `json:"change_fraction"`  // of pages: content changes over time (0.3)
	ChangePeriod   time.Duration `json:"change_period_ns"` // median period of a changing page (24h)
	Trivial        float64       `json:"trivial"`          // of pages: a counter or clock changes on every request (0.2)
	Disallow       float64       `json:"disallow"`         // of sites: robots.txt disallows a section (0.2)
	CrawlDelay     float64       `json:"crawl_delay"`      // of sites: robots.txt asks for a crawl delay (0.1)
	NoRobots       float64       `json:"no_robots"`        // of sites: robots.txt is 404 (0.05)
	RobotsError    float64       `json:"robots_error"`     // of sites: robots.txt answers 503, so nothing may be crawled (0.02)
	Sitemaps       float64       `json:"sitemaps"`         // of sites: sitemap.xml, an index of sitemaps when large (0.6)
	Feeds          float64       `json:"feeds"`            // of sites: RSS 2.0 and Atom feeds of recent changes (0.3)
	Structured     float64       `json:"structured"`       // of sites: schema.org structured data on every page, of one of SchemaTypes, in JSON-LD (3 in 5) or microdata, broken on 1 page in 10 (0.3)
	Gzip           float64       `json:"gzip"`             // of sites: gzip content coding when the client accepts it (0.5)
	NoValidators   float64       `json:"no_validators"`    // of sites: no Last-Modified or ETag (0.2)
	Flaky          float64       `json:"flaky"`            // of sites: 503 with Retry-After on about one request in five (0.03)
	ErrorPages     float64       `json:"error_pages"`      // of pages: always 500 (0.01)
	Redirects      float64       `json:"redirects"`        // of links: to an old URL that redirects (301/302/307/308) to the page (0.03)
	Aliases        float64       `json:"aliases"`          // of sites: a www alias name that redirects to the canonical name (0.2)
	Hostile        int           `json:"hostile"`          // hostile sites, one kind after another in HostileKind order (so the first five are the kinds of before HugeHeaders was added); hostile only while the running world's hostile mode is on (5)
}

// DefaultParams returns parameters for a small world of 100 sites and 8
// nodes with every anomaly and content feature at a realistic rate.
func DefaultParams() Params {
	return Params{
		Seed:           1,
		Sites:          100,
		Nodes:          8,
		Port:           8080,
		MaxDepth:       8,
		International:  0.25,
		AdjacentFar:    0.15,
		OtherCity:      0.35,
		FarRTT:         100,
		SharedHosting:  0.3,
		SharedSize:     40,
		SitesPerAddr:   1,
		CDN:            0.02,
		CDNPoPs:        8,
		SelfHosted:     0.15,
		ISPHosted:      0.07,
		MultiAlloc:     0.2,
		Unary:          0.1,
		NodesAtHosting: 0.2,
		StaleCountry:   0.2,
		IntraCityRTT:   2,
		Jitter:         1,
		DefaultCity:    "Frankfurt",
		MeanPages:      20,
		PageWeight:     24000,
		MaxPages:       400,
		CrossLinks:     1.5,
		Popularity:     1.0,
		BrokenLinks:    0.02,
		ChangeFraction: 0.3,
		ChangePeriod:   24 * time.Hour,
		Trivial:        0.2,
		Disallow:       0.2,
		CrawlDelay:     0.1,
		NoRobots:       0.05,
		RobotsError:    0.02,
		Sitemaps:       0.6,
		Feeds:          0.3,
		Structured:     0.3,
		Gzip:           0.5,
		NoValidators:   0.2,
		Flaky:          0.03,
		ErrorPages:     0.01,
		Redirects:      0.03,
		Aliases:        0.2,
		Hostile:        5,
	}
}

// Validate reports the first invalid parameter, wrapping ErrParams.
func (p *Params) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrParams, fmt.Sprintf(format, args...))
	}
	switch {
	case p.Latency != "" && p.Latency != LatencyMatrix && p.Latency != LatencyModel:
		return bad("latency must be %q or %q, got %q", LatencyMatrix, LatencyModel, p.Latency)
	case p.Geo != "" && p.FromReal:
		return bad("geo and from real exclude each other")
	case p.GeoOrg != "" && p.Geo == "":
		return bad("geo org needs geo")
	case len(p.GeoOrg) > 256:
		return bad("geo org of %d bytes", len(p.GeoOrg))
	case p.MeanPages < 1 || p.MaxPages < 1 || p.MeanPages > p.MaxPages || p.MaxPages > 100_000:
		return bad("mean pages (%d) must be 1 to max pages (%d), at most 100000", p.MeanPages, p.MaxPages)
	}
	err := cmp.Or(
		check.Range("sites", p.Sites, 1, 100_000),
		check.Range("nodes", p.Nodes, 1, 10_000),
		check.Range("port", p.Port, 0, 65535),
		check.Range("max depth", p.MaxDepth, 4, 8),
		check.Range("shared size", p.SharedSize, 1, 1000),
		check.Range("sites per address", p.SitesPerAddr, 1, 100),
		check.Range("CDN points of presence", p.CDNPoPs, 2, 32),
		check.Range("far RTT (ms)", p.FarRTT, 0, 400),
		check.Range("intra-city RTT (ms)", p.IntraCityRTT, 0, 50),
		check.Range("jitter", p.Jitter, 0, 10),
		check.Range("page weight (bytes)", p.PageWeight, 0, 1<<20),
		check.Range("cross links", p.CrossLinks, 0, 50),
		check.Range("popularity exponent", p.Popularity, 0, 3),
		check.AtLeast("change period", p.ChangePeriod, time.Minute),
		check.Range("hostile sites", p.Hostile, 0, p.Sites),
	)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrParams, err)
	}
	fr := []struct {
		name string
		v    float64
	}{
		{"international", p.International}, {"adjacent far", p.AdjacentFar}, {"other city", p.OtherCity}, {"shared hosting", p.SharedHosting},
		{"cdn", p.CDN}, {"self hosted", p.SelfHosted}, {"isp hosted", p.ISPHosted}, {"multi alloc", p.MultiAlloc},
		{"unary", p.Unary}, {"nodes at hosting", p.NodesAtHosting}, {"stale country", p.StaleCountry},
		{"broken links", p.BrokenLinks}, {"change fraction", p.ChangeFraction}, {"trivial", p.Trivial},
		{"disallow", p.Disallow}, {"crawl delay", p.CrawlDelay}, {"no robots", p.NoRobots}, {"robots error", p.RobotsError},
		{"sitemaps", p.Sitemaps}, {"feeds", p.Feeds}, {"structured", p.Structured}, {"gzip", p.Gzip}, {"no validators", p.NoValidators},
		{"flaky", p.Flaky}, {"error pages", p.ErrorPages}, {"redirects", p.Redirects}, {"aliases", p.Aliases},
	}
	for _, f := range fr {
		if !(f.v >= 0 && f.v <= 1) {
			return bad("%s must be a fraction in [0, 1], got %v", f.name, f.v)
		}
	}
	if s := p.SharedHosting + p.CDN + p.SelfHosted + p.ISPHosted; s > 1 {
		return bad("shared hosting + cdn + self hosted + isp hosted must not exceed 1, got %v", s)
	}
	if s := p.AdjacentFar + p.OtherCity; s > 1 {
		return bad("adjacent far + other city must not exceed 1, got %v", s)
	}
	if p.Disallow+p.CrawlDelay+p.NoRobots+p.RobotsError > 1 {
		return bad("disallow + crawl delay + no robots + robots error must not exceed 1")
	}
	return nil
}
