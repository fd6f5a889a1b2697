"""critest image.go: "Image Manager" (pulls go through registry mirrors to the local registry)."""

import grpc
import pytest

from tests.conformance.cri import framework as fw


def _test_remove(f, image):
    f.remove_image(image)
    assert f.image_status(image) is None, "Should have none image in list"


def _test_pull(f, image, check):
    f.remove_image(image)
    f.pull(image)
    st = f.image_status(image)
    assert st is not None and st.id and st.size
    check(st)
    _test_remove(f, image)


def test_public_image_with_tag_should_be_pulled_and_removed(f):
    def check(st):
        assert list(st.repo_tags) == [fw.IMAGE_WITH_TAG]
    _test_pull(f, fw.IMAGE_WITH_TAG, check)


def test_public_image_should_timeout_if_requested(f):
    with pytest.raises(grpc.RpcError) as e:
        f.pull(fw.IMAGE_WITH_TAG, timeout=0.001)
    assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED


def test_public_image_without_tag_should_be_pulled_and_removed(f):
    def check(st):
        assert list(st.repo_tags) == [fw.IMAGE_WITHOUT_TAG + ":latest"]
    _test_pull(f, fw.IMAGE_WITHOUT_TAG, check)


def test_public_image_with_digest_should_be_pulled_and_removed(f, mirror):
    def check(st):
        assert list(st.repo_tags) == []
        assert list(st.repo_digests) == [mirror.digest_ref]
    _test_pull(f, mirror.digest_ref, check)


def test_image_status_should_support_all_kinds_of_references(f):
    image = fw.IMAGE_ALL_REFERENCES
    f.remove_image(image)
    f.pull(image)
    st = f.image_status(image)
    assert st is not None
    assert f.image_status(st.id) == st, f"image status with {st.id}"
    for ref in [*st.repo_tags, *st.repo_digests]:
        assert f.image_status(ref) == st, f"image status with {ref}"
    _test_remove(f, image)


def test_image_status_get_image_fields_should_not_have_uid_username_empty(f):
    cases = [("UID only", fw.IMAGE_USER_UID, fw.IMAGE_USER_UID_VALUE, ""),
             ("Username only", fw.IMAGE_USER_USERNAME, 0, fw.IMAGE_USER_USERNAME_VALUE),
             ("UID:group", fw.IMAGE_USER_UID_GROUP, fw.IMAGE_USER_UID_GROUP_VALUE, ""),
             ("Username:group", fw.IMAGE_USER_USERNAME_GROUP, 0, fw.IMAGE_USER_USERNAME_VALUE)]
    for what, image, uid, username in cases:
        f.pull(image)
        f.cleanups.append(lambda image=image: f.remove_image(image))
        st = f.image_status(image)
        assert st.uid.value == uid, f"{what}, Image Uid should be {uid}"
        assert st.username == username, f"{what}, Image Username should be {username}"


def test_listimage_should_get_exactly_3_image_in_the_result_list(f):
    refs = fw.DIFFERENT_TAG_DIFFERENT_IMAGE
    for r in refs:
        f.remove_image(r)
    ids = [f.pull(r) for r in refs]
    f.cleanups.append(lambda: [f.remove_image(r) for r in refs])
    assert len(ids) == 3
    images = f.list_images()
    for ref, iid in zip(refs, ids, strict=True):
        for img in images:
            if img.id == iid:
                assert list(img.repo_tags) == [ref], "Repo tag should be correct"
                break


def test_listimage_should_get_exactly_3_repotags_in_the_result_image(f):
    refs = fw.DIFFERENT_TAG_SAME_IMAGE
    for r in refs:
        f.remove_image(r)
    ids = sorted({f.pull(r) for r in refs})
    f.cleanups.append(lambda: [f.remove_image(r) for r in refs])
    assert len(ids) == 1, "Only 1 image id should be returned"
    for img in f.list_images():
        if img.id == ids[0]:
            assert sorted(img.repo_tags) == sorted(refs), "Should have 3 repoTags in single image"
            break

