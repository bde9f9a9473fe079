package world

// country is what the world knows of one country of the latency data: its
// ISO 3166 alpha-2 code as the RIR files publish it, the Regional Internet
// Registry that serves it, its top-level domain and the usual suffix of a
// company name there.
type country struct {
	code, registry, tld, suffix string
}

// countries maps the country names of the WonderProxy servers file to their
// codes and registries. Every country of the 2020-07-19 file is listed; a
// server whose country is missing here is not used (and is reported by the
// loader's tests).
var countries = map[string]country{
	"Albania":              {"AL", "ripencc", "al", "Sh.p.k."},
	"Algeria":              {"DZ", "afrinic", "dz", "SARL"},
	"Argentina":            {"AR", "lacnic", "com.ar", "S.A."},
	"Australia":            {"AU", "apnic", "com.au", "Pty Ltd"},
	"Austria":              {"AT", "ripencc", "at", "GmbH"},
	"Bangladesh":           {"BD", "apnic", "com.bd", "Ltd"},
	"Belgium":              {"BE", "ripencc", "be", "BV"},
	"Brazil":               {"BR", "lacnic", "com.br", "Ltda"},
	"Bulgaria":             {"BG", "ripencc", "bg", "EOOD"},
	"Cambodia":             {"KH", "apnic", "com.kh", "Co., Ltd"},
	"Canada":               {"CA", "arin", "ca", "Inc."},
	"Chile":                {"CL", "lacnic", "cl", "SpA"},
	"China":                {"CN", "apnic", "cn", "Co., Ltd"},
	"Colombia":             {"CO", "lacnic", "com.co", "S.A.S."},
	"Costa Rica":           {"CR", "lacnic", "cr", "S.A."},
	"Croatia":              {"HR", "ripencc", "hr", "d.o.o."},
	"Cyprus":               {"CY", "ripencc", "com.cy", "Ltd"},
	"Czech Republic":       {"CZ", "ripencc", "cz", "s.r.o."},
	"Denmark":              {"DK", "ripencc", "dk", "ApS"},
	"Ecuador":              {"EC", "lacnic", "ec", "S.A."},
	"Egypt":                {"EG", "afrinic", "com.eg", "S.A.E."},
	"Estonia":              {"EE", "ripencc", "ee", "OU"},
	"Finland":              {"FI", "ripencc", "fi", "Oy"},
	"France":               {"FR", "ripencc", "fr", "SAS"},
	"Georgia":              {"GE", "ripencc", "ge", "LLC"},
	"Germany":              {"DE", "ripencc", "de", "GmbH"},
	"Ghana":                {"GH", "afrinic", "com.gh", "Ltd"},
	"Greece":               {"GR", "ripencc", "gr", "S.A."},
	"Guatemala":            {"GT", "lacnic", "com.gt", "S.A."},
	"Honduras":             {"HN", "lacnic", "hn", "S.A."},
	"Hong Kong":            {"HK", "apnic", "com.hk", "Ltd"},
	"Hungary":              {"HU", "ripencc", "hu", "Kft."},
	"Iceland":              {"IS", "ripencc", "is", "ehf."},
	"India":                {"IN", "apnic", "in", "Pvt Ltd"},
	"Indonesia":            {"ID", "apnic", "co.id", "PT"},
	"Ireland":              {"IE", "ripencc", "ie", "Ltd"},
	"Isle of Man":          {"IM", "ripencc", "im", "Ltd"},
	"Israel":               {"IL", "ripencc", "co.il", "Ltd"},
	"Italy":                {"IT", "ripencc", "it", "S.r.l."},
	"Japan":                {"JP", "apnic", "jp", "K.K."},
	"Kazakhstan":           {"KZ", "ripencc", "kz", "LLP"},
	"Kenya":                {"KE", "afrinic", "co.ke", "Ltd"},
	"Kosovo":               {"XK", "ripencc", "com", "Sh.p.k."},
	"Latvia":               {"LV", "ripencc", "lv", "SIA"},
	"Lebanon":              {"LB", "ripencc", "com.lb", "SAL"},
	"Lithuania":            {"LT", "ripencc", "lt", "UAB"},
	"Luxembourg":           {"LU", "ripencc", "lu", "S.A."},
	"Malaysia":             {"MY", "apnic", "com.my", "Sdn Bhd"},
	"Malta":                {"MT", "ripencc", "com.mt", "Ltd"},
	"Mexico":               {"MX", "lacnic", "com.mx", "S.A. de C.V."},
	"Moldova":              {"MD", "ripencc", "md", "SRL"},
	"Morocco":              {"MA", "afrinic", "ma", "SARL"},
	"Netherlands":          {"NL", "ripencc", "nl", "B.V."},
	"New Zealand":          {"NZ", "apnic", "co.nz", "Ltd"},
	"Nigeria":              {"NG", "afrinic", "com.ng", "Ltd"},
	"Norway":               {"NO", "ripencc", "no", "AS"},
	"Pakistan":             {"PK", "apnic", "com.pk", "Pvt Ltd"},
	"Panama":               {"PA", "lacnic", "com.pa", "S.A."},
	"Peru":                 {"PE", "lacnic", "com.pe", "S.A.C."},
	"Philippines":          {"PH", "apnic", "com.ph", "Inc."},
	"Poland":               {"PL", "ripencc", "pl", "Sp. z o.o."},
	"Portugal":             {"PT", "ripencc", "pt", "Lda"},
	"Puerto Rico":          {"PR", "arin", "com", "LLC"},
	"Romania":              {"RO", "ripencc", "ro", "SRL"},
	"Russia":               {"RU", "ripencc", "ru", "LLC"},
	"Saudi Arabia":         {"SA", "ripencc", "com.sa", "Co."},
	"Serbia":               {"RS", "ripencc", "rs", "d.o.o."},
	"Singapore":            {"SG", "apnic", "com.sg", "Pte Ltd"},
	"Slovakia":             {"SK", "ripencc", "sk", "s.r.o."},
	"Slovenia":             {"SI", "ripencc", "si", "d.o.o."},
	"South Africa":         {"ZA", "afrinic", "co.za", "(Pty) Ltd"},
	"South Korea":          {"KR", "apnic", "co.kr", "Co., Ltd"},
	"Spain":                {"ES", "ripencc", "es", "S.L."},
	"Suriname":             {"SR", "lacnic", "sr", "N.V."},
	"Sweden":               {"SE", "ripencc", "se", "AB"},
	"Switzerland":          {"CH", "ripencc", "ch", "AG"},
	"Taiwan":               {"TW", "apnic", "com.tw", "Co., Ltd"},
	"Tanzania":             {"TZ", "afrinic", "co.tz", "Ltd"},
	"Thailand":             {"TH", "apnic", "co.th", "Co., Ltd"},
	"Tunisia":              {"TN", "afrinic", "tn", "SARL"},
	"Turkey":               {"TR", "ripencc", "com.tr", "A.S."},
	"Uganda":               {"UG", "afrinic", "co.ug", "Ltd"},
	"Ukraine":              {"UA", "ripencc", "com.ua", "LLC"},
	"United Arab Emirates": {"AE", "ripencc", "ae", "LLC"},
	"United Kingdom":       {"GB", "ripencc", "co.uk", "Ltd"},
	"United States":        {"US", "arin", "com", "Inc."},
	"Uruguay":              {"UY", "lacnic", "com.uy", "S.A."},
	"Venezuela":            {"VE", "lacnic", "com.ve", "C.A."},
	"Vietnam":              {"VN", "apnic", "vn", "JSC"},
}

// registries lists the five RIRs in a fixed order: the order of the
// world's delegated files and of the RPSL sources.
var registries = []string{"afrinic", "apnic", "arin", "lacnic", "ripencc"}

// rpslSource returns the RPSL "source:" value of a registry, as the
// subnet importer maps back to the registry name.
func rpslSource(reg string) string {
	switch reg {
	case "ripencc":
		return "RIPE"
	case "afrinic":
		return "AFRINIC"
	case "apnic":
		return "APNIC"
	case "arin":
		return "ARIN"
	case "lacnic":
		return "LACNIC"
	}
	return "IANA"
}
