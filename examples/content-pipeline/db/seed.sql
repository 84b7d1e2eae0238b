-- Fictional seed data for the input stage of the content pipeline. Every person, company
-- and address is invented; URLs use example.com / example.org only.
-- Later-stage tables (research_briefs onward, agent_log) start empty: the agent fills them.

INSERT INTO founder_content (id, title, format, body, url, published_on) VALUES
    (1, 'Why we stopped sending invoices on Fridays', 'post',
     'Small change, big effect: invoices sent on Tuesday mornings were paid four days sooner on average in our own books.',
     'https://blog.example.com/invoices-on-tuesdays', '2024-02-13'),
    (2, 'Bootstrapping a bookkeeping tool for bakeries', 'talk',
     'Notes from a meetup talk: start with the one report the owner opens every Monday, and build backwards from it.',
     'https://talks.example.com/bakery-books', '2024-03-07'),
    (3, 'The spreadsheet our first ten customers shared with us', 'essay',
     'Every early customer had the same three tabs. We turned those tabs into our onboarding.',
     'https://blog.example.com/first-ten-spreadsheets', '2024-04-22'),
    (4, 'Draft: cash flow is a habit, not a report', 'newsletter',
     'Unpublished outline about weekly cash-flow rituals for one-person businesses.',
     NULL, NULL);

INSERT INTO competitor_content (id, competitor, title, url, channel, summary, engagement, published_on) VALUES
    (1, 'LedgerLark', '7 bookkeeping mistakes that cost small shops money', 'https://ledgerlark.example.org/blog/seven-mistakes',
     'blog', 'Numbered listicle with one anecdote per mistake and a trial offer at the end.', 1840, '2024-03-02'),
    (2, 'Tallyfox', 'We asked 200 freelancers how they get paid', 'https://tallyfox.example.com/survey-2024',
     'linkedin', 'Survey carousel; opens with a surprising statistic, ends with a question to the reader.', 5120, '2024-03-18'),
    (3, 'LedgerLark', 'Monthly close in 30 minutes', 'https://ledgerlark.example.org/newsletter/close-in-30',
     'newsletter', 'Step-by-step checklist with screenshots; strong but generic.', 960, '2024-04-01'),
    (4, 'Penny Harbor', 'Thread: the invoice template that gets paid', 'https://x.example.com/pennyharbor/status/1001',
     'x', 'Short thread, before/after template comparison, high reply count.', 7305, '2024-04-10');

INSERT INTO trends (id, topic, description, momentum, source_url, observed_on) VALUES
    (1, 'Late-payment anxiety among freelancers', 'Rising discussion of chasing unpaid invoices and automatic reminders.',
     5, 'https://trends.example.org/late-payments', '2024-04-15'),
    (2, 'E-invoicing mandates', 'Several fictional regions announce electronic invoicing requirements for small businesses.',
     4, 'https://news.example.org/e-invoicing-mandates', '2024-04-18'),
    (3, 'AI receipt scanning', 'Owners try phone-camera receipt capture; trust in accuracy is the open question.',
     3, NULL, '2024-04-20');

INSERT INTO research (id, title, source_type, summary, source_url, credibility) VALUES
    (1, 'Small Business Payment Times Report 2024', 'report',
     'Median invoice paid in 27 days; invoices with a due date in the subject line paid 5 days sooner.',
     'https://research.example.org/payment-times-2024', 4),
    (2, 'Freelancer cash-flow survey (n=412)', 'survey',
     'Six in ten respondents had at least one invoice more than 60 days overdue in the past year.',
     'https://survey.example.org/freelancer-cash-flow', 3),
    (3, 'Interview: a bakery owner on month-end', 'interview',
     'Month-end takes a full Sunday; the hardest part is matching card payouts to sales.',
     'https://notes.example.com/interviews/bakery-month-end', 5);

INSERT INTO communications (id, channel, sender, subject, body, sentiment, received_at) VALUES
    (1, 'support', 'maria@bakery.example.com', 'Reminder emails',
     'Can the reminder go out three days before the due date instead of on it?', 'neutral', '2024-04-11 09:14:00'),
    (2, 'email', 'jon@studio.example.org', 'Thank you',
     'The Tuesday tip from your blog got two clients to pay the same week. Thanks!', 'positive', '2024-04-16 17:42:00'),
    (3, 'community', 'anon-4821', 'E-invoicing?',
     'Will you support the new e-invoicing format, or do I need a second tool?', 'negative', '2024-04-19 12:05:00'),
    (4, 'call', 'team: sales', 'Call notes: florist chain',
     'Prospect keeps a paper ledger for cash sales and wants a way to photograph it.', 'neutral', '2024-04-21 15:30:00');

INSERT INTO voice_profile (id, name, audience, tone, do_rules, dont_rules, sample_phrases, is_active) VALUES
    (1, 'Founder, plain-spoken', 'Owners of one- to ten-person businesses',
     'Direct, warm, concrete; numbers before adjectives',
     'Open with a real situation
Give one number per claim
End with one thing to try this week',
     'No jargon without a definition
No fear-based hooks
No more than one exclamation mark',
     'Here is what we saw in our own books.', 1),
    (2, 'Company, formal', 'Accountants and partners',
     'Precise and measured',
     'Cite the source of every figure
Use full product names',
     'No slang
No first-person singular',
     NULL, 0);

INSERT INTO content_patterns (id, competitor_content_id, founder_content_id, pattern_type, description) VALUES
    (1, 2, NULL, 'hook', 'Lead with a surprising survey statistic, then ask the reader to compare.'),
    (2, 4, NULL, 'format', 'Before/after comparison of a template in a short thread.'),
    (3, NULL, 1, 'topic', 'Timing experiments from our own data outperform generic advice.');
