def test_pages(admin):
    for path in ("/dashboard", "/dashboard/send", "/dashboard/send/bulk", "/dashboard/orders", "/dashboard/rewards",
                 "/dashboard/campaigns", "/dashboard/funding", "/dashboard/team", "/dashboard/developers",
                 "/dashboard/campaigns/new", "/dashboard/campaigns/preview/page?products=PGCNWBOOKS01US&page_headline=Hi",
                 "/dashboard/campaigns/preview/email?email_subject_line=Yo"):
        r = admin.get(path)
        assert r.status_code == 200, (path, r.text[:3000])
