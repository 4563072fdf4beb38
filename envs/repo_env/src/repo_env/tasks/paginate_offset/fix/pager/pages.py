"""Pagination."""


def page_count(n_items, per_page):
    if per_page <= 0:
        raise ValueError("per_page must be positive")
    return -(-n_items // per_page)


def paginate(items, page, per_page):
    if page < 1:
        raise ValueError("pages start at 1")
    start = (page - 1) * per_page
    return items[start : start + per_page]
