package textproc

// stopWords are English function words plus month and weekday names: the
// latter carry little search value and change daily on many pages, so
// keeping them out makes change detection ignore date lines.
var stopWords = func() map[string]struct{} {
	m := make(map[string]struct{})
	for _, w := range []string{
		"a", "about", "above", "after", "again", "against", "all", "also", "am", "an", "and", "any", "are", "aren't", "as", "at",
		"be", "because", "been", "before", "being", "below", "between", "both", "but", "by",
		"can", "cannot", "could", "couldn't", "did", "didn't", "do", "does", "doesn't", "doing", "don't", "down", "during",
		"each", "either", "else", "etc", "ever", "every", "few", "for", "from", "further",
		"get", "got", "had", "hadn't", "has", "hasn't", "have", "haven't", "having", "he", "he'd", "he'll", "he's", "her", "here", "here's", "hers", "herself", "him", "himself", "his", "how", "how's", "however",
		"i", "i'd", "i'll", "i'm", "i've", "if", "in", "into", "is", "isn't", "it", "it's", "its", "itself",
		"just", "let's", "like", "may", "me", "might", "more", "most", "much", "must", "mustn't", "my", "myself",
		"no", "nor", "not", "now", "of", "off", "on", "once", "one", "only", "or", "other", "ought", "our", "ours", "ourselves", "out", "over", "own",
		"per", "same", "shall", "shan't", "she", "she'd", "she'll", "she's", "should", "shouldn't", "since", "so", "some", "such",
		"than", "that", "that's", "the", "their", "theirs", "them", "themselves", "then", "there", "there's", "these", "they", "they'd", "they'll", "they're", "they've", "this", "those", "though", "through", "thus", "to", "too",
		"under", "until", "up", "upon", "us", "very", "via", "was", "wasn't", "we", "we'd", "we'll", "we're", "we've", "were", "weren't", "what", "what's", "when", "when's", "where", "where's", "whether", "which", "while", "who", "who's", "whom", "whose", "why", "why's", "will", "with", "within", "without", "won't", "would", "wouldn't",
		"yet", "you", "you'd", "you'll", "you're", "you've", "your", "yours", "yourself", "yourselves",
		"january", "february", "march", "april", "june", "july", "august", "september", "october", "november", "december",
		"jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec",
		"monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday",
		"mon", "tue", "wed", "thu", "fri", "sat", "sun", "today", "yesterday", "tomorrow", "ago",
		"am", "pm", "utc", "gmt",
	} {
		m[w] = struct{}{}
	}
	return m
}()

// IsStopWord reports whether the lower-case word w is ignored.
func IsStopWord(w string) bool {
	_, ok := stopWords[w]
	return ok
}
